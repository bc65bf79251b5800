// The opt-in that makes Azure publish the VMs' Scheduled Events to Event Grid and Resource Graph
// (preview: docs/azure-feed.md): scheduledEventsPolicy.scheduledEventsAdditionalPublishingTargets.
// eventGridAndResourceGraph, on standalone VMs and on scale sets. The VMs of one availability set
// or scale set must all have the same policy, so it goes on the set, never on one of its VMs; an
// availability set's policy belongs in the availability set's own template (docs/deploy.md).
//
// Each PUT carries only the policy (and the location the resource already has): the Compute
// resource provider keeps the other properties, as for the agent identity (vm-agent.bicep).

@description('Standalone VMs (in no availability set or scale set) to opt in, in this resource group.')
param vmNames array = []

@description('Scale sets to opt in, in this resource group.')
param scaleSetNames array = []

@description('Also approve user-initiated reboots and redeploys at once (no notice for them): false keeps their notice, so the coordinator paces them too.')
param autoApproveUserEvents bool = false

@description('allInstancesDown.automaticallyApprove: when every instance of the VM, availability set or scale set is already down, Azure approves the event by itself, before NotBefore (Azure\'s default is true, said here explicitly). false: such an event waits for an approval or its NotBefore like any other.')
param allInstancesDownAutoApprove bool = true

// scheduledEventsApiVersion and allInstancesDown arrived with Compute 2025-04-01: the api-version
// of the resources below.
var policy = union({
  scheduledEventsAdditionalPublishingTargets: {
    eventGridAndResourceGraph: {
      enable: true
      scheduledEventsApiVersion: '2020-07-01'
    }
  }
  allInstancesDown: {
    automaticallyApprove: allInstancesDownAutoApprove
  }
}, autoApproveUserEvents ? {
  userInitiatedRedeploy: {
    automaticallyApprove: true
  }
  userInitiatedReboot: {
    automaticallyApprove: true
  }
} : {})

resource existingVms 'Microsoft.Compute/virtualMachines@2025-04-01' existing = [for name in vmNames: {
  name: name
}]

resource vms 'Microsoft.Compute/virtualMachines@2025-04-01' = [for (name, i) in vmNames: {
  // This PUT of an existing VM carries only its scheduledEventsPolicy; the Compute resource provider
  // keeps the VM's other properties, which this template neither sets nor weakens. Checks about those:
  // checkov:skip=CKV_AZURE_1: OS profile (SSH keys vs passwords) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_178: OS profile (SSH keys) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_149: OS profile (password authentication) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_151: disk encryption of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_97: security profile (encryption at host) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_50: no extension is installed here; the VM's extensions are not managed by this PUT.
  name: name
  location: existingVms[i].location
  properties: {
    scheduledEventsPolicy: policy
  }
}]

resource existingSets 'Microsoft.Compute/virtualMachineScaleSets@2025-04-01' existing = [for name in scaleSetNames: {
  name: name
}]

resource sets 'Microsoft.Compute/virtualMachineScaleSets@2025-04-01' = [for (name, i) in scaleSetNames: {
  // This PUT of an existing scale set carries only its scheduledEventsPolicy; the Compute resource
  // provider keeps its other properties, which this template neither sets nor weakens. Checks about those:
  // checkov:skip=CKV_AZURE_49: OS profile (SSH keys) of an existing scale set is not managed here.
  // checkov:skip=CKV_AZURE_178: OS profile (SSH keys) of an existing scale set is not managed here.
  // checkov:skip=CKV_AZURE_149: OS profile (password authentication) of an existing scale set is not managed here.
  // checkov:skip=CKV_AZURE_97: security profile (encryption at host) of an existing scale set is not managed here.
  // checkov:skip=CKV_AZURE_95: the upgrade policy (automatic OS image patching) of an existing scale set is not managed here.
  name: name
  location: existingSets[i].location
  properties: {
    scheduledEventsPolicy: policy
  }
}]
