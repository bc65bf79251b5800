// User-assigned managed identities: one per VM for the agent (so that each VM can read only its own
// approval queue), and optionally one for the fleet coordinator. Identities carry no rights by
// themselves; the role assignments live next to the resources they grant access to
// (eventhubs.bicep, approval-queues.bicep).

@description('Azure region of the identities.')
param location string

@description('Prefix of the identity names.')
param namePrefix string

@description('VM names; one agent identity is created for each, in the same order.')
param vmNames array

@description('Also create an identity for the fleet coordinator.')
param deployCoordinator bool = false

@description('Tags for every resource.')
param tags object = {}

resource agent 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = [for vm in vmNames: {
  // Identity names allow letters, digits, '-' and '_'; VM names may also have '.'.
  name: take('${namePrefix}-agent-${replace(vm, '.', '-')}', 128)
  location: location
  tags: tags
}]

resource coordinator 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = if (deployCoordinator) {
  name: '${namePrefix}-coordinator'
  location: location
  tags: tags
}

@description('Resource IDs of the agent identities, in the order of vmNames.')
output agentIds array = [for (vm, i) in vmNames: agent[i].id]

@description('Principal (object) IDs of the agent identities, in the order of vmNames.')
output agentPrincipalIds array = [for (vm, i) in vmNames: agent[i].properties.principalId]

@description('Client IDs of the agent identities, in the order of vmNames (AZURE_CLIENT_ID on each VM).')
output agentClientIds array = [for (vm, i) in vmNames: agent[i].properties.clientId]

@description('Principal ID of the coordinator identity, or empty.')
output coordinatorPrincipalId string = deployCoordinator ? coordinator.properties.principalId : ''

@description('Client ID of the coordinator identity, or empty.')
output coordinatorClientId string = deployCoordinator ? coordinator.properties.clientId : ''

@description('Resource ID of the coordinator identity, or empty.')
output coordinatorId string = deployCoordinator ? coordinator.id : ''
