// The coordinator's rights on Azure's side of the feed, in one VMs' resource group only (deploy it
// with that scope, once per resource group of VMs):
//   - the custom role of coordinator-reader-role.bicep (read the VMs, their sets, instance views and
//     scheduled events, nothing else): Resource Graph answers only what the principal may read;
//   - Scheduled Events Contributor, only with acknowledge: approving a scheduled event from outside
//     the VM (the Maintenance acknowledge). Its definition ID is taken from public lists of built-in
//     roles, not from a Microsoft page: check it with
//     az role definition list --name "Scheduled Events Contributor" (docs/azure-feed.md).

@description('Principal ID of the coordinator\'s identity.')
param coordinatorPrincipalId string

@description('Also let the coordinator acknowledge scheduled events ([azure] acknowledge = true).')
param acknowledge bool = false

@description('Resource ID of the custom reader role (coordinator-reader-role.bicep).')
param readerRoleId string
var scheduledEventsContributor = 'b67fe603-310e-4889-b9ee-8257d09d353d'

resource reads 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resourceGroup().id, coordinatorPrincipalId, readerRoleId)
  properties: {
    roleDefinitionId: readerRoleId
    principalId: coordinatorPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: read the VMs and their scheduled events (Resource Graph) here'
  }
}

resource acknowledges 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (acknowledge) {
  name: guid(resourceGroup().id, coordinatorPrincipalId, scheduledEventsContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', scheduledEventsContributor)
    principalId: coordinatorPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: acknowledge the scheduled events of the VMs here'
  }
}
