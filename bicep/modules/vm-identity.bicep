// The identities an existing VM has now, read in a deployment of their own: the module that attaches
// the agent's identity PUTs the same VM, and a template may not read a resource it is writing (the
// value must be the one from before that PUT).
//
// A VM without any identity has no identity block: both outputs then say so ('None', {}).

@description('Name of the existing VM.')
param vmName string

resource existingVm 'Microsoft.Compute/virtualMachines@2024-03-01' existing = {
  name: vmName
}

@description('The VM\'s identity type now: None, SystemAssigned, UserAssigned or \'SystemAssigned, UserAssigned\'.')
output identityType string = (existingVm.?identity.?type) ?? 'None'

@description('The VM\'s user-assigned identities now, as { \'<resource id>\': {...} }.')
output userAssignedIdentities object = (existingVm.?identity.?userAssignedIdentities) ?? {}

@description('The VM\'s vmId (names its approval queue).')
output vmId string = existingVm.properties.vmId
