// A custom role for the coordinator's reads through Resource Graph, narrower than Reader (which
// reads every resource of its scope: vaults' metadata, networks, ...): the VMs, their instance
// views, availability sets, scale sets and their instances, and the maintenance resources (the
// scheduled events). Resource Graph answers only what the principal may read, so this is what
// the coordinator sees. Deployed once per VM subscription (a role definition is a subscription's).
targetScope = 'subscription'

var roleName = 'se-forwarder coordinator reader'

resource role 'Microsoft.Authorization/roleDefinitions@2022-04-01' = {
  name: guid(subscription().id, roleName)
  properties: {
    roleName: '${roleName} (${subscription().subscriptionId})'
    description: 'se-forwarder coordinator: read VMs, their sets and their scheduled events (Resource Graph), nothing else'
    type: 'CustomRole'
    permissions: [
      {
        actions: [
          'Microsoft.Compute/virtualMachines/read'
          'Microsoft.Compute/virtualMachines/instanceView/read'
          'Microsoft.Compute/availabilitySets/read'
          'Microsoft.Compute/virtualMachineScaleSets/read'
          'Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read'
          'Microsoft.Compute/virtualMachineScaleSets/virtualMachines/instanceView/read'
          'Microsoft.Maintenance/*/read'
          'Microsoft.Resources/subscriptions/resourceGroups/read'
        ]
        notActions: []
        dataActions: []
        notDataActions: []
      }
    ]
    assignableScopes: [
      subscription().id
    ]
  }
}

@description('Resource ID of the role definition.')
output roleDefinitionId string = role.id
