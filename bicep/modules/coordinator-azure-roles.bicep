// The coordinator's rights on Azure's side of the feed, in the VMs' resource group only (deploy it
// with that scope):
//   - Reader: Resource Graph answers only what the principal may read, so this is what lets the
//     coordinator see the VMs, their availability and scale sets, their instance views and their
//     scheduled events (maintenanceresources);
//   - Scheduled Events Contributor, only with acknowledge: approving a scheduled event from outside
//     the VM (the Maintenance acknowledge). Its definition ID is taken from public lists of built-in
//     roles, not from a Microsoft page: check it with
//     az role definition list --name "Scheduled Events Contributor" (docs/azure-feed.md).

@description('Principal ID of the coordinator\'s identity.')
param coordinatorPrincipalId string

@description('Also let the coordinator acknowledge scheduled events ([azure] acknowledge = true).')
param acknowledge bool = false

var reader = 'acdd72a7-3385-48ef-bd42-f606fba81ae7'
var scheduledEventsContributor = 'b67fe603-310e-4889-b9ee-8257d09d353d'

resource reads 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resourceGroup().id, coordinatorPrincipalId, reader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', reader)
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
