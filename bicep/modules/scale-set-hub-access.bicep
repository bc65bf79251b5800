// The rights of one uniform scale set's agent identity on the shared resources (deploy it in the
// hub's resource group), made once for the set, so that instances autoscaling adds later need no
// deployment of their own:
//   - Azure Event Hubs Data Sender on the hub;
//   - Storage Queue Data Contributor on the queue account, so that each instance creates its own
//     queue se-approvals-<vmId> when its agent starts. Azure cannot limit the creation of queues by
//     name, so an instance can also create, read and delete other queues' messages of that account:
//     it can withhold another VM's approvals (the event then starts at its NotBefore, as without
//     a coordinator) but never forge one (approvals are signed and name their VM). Put scale sets
//     where that matters in flexible orchestration (their instances are ordinary VMs: agents.bicep);
//   - for the coordinator, Storage Queue Data Message Sender on the account (the instances' queues
//     do not exist yet when this is deployed).

@description('The existing queue account.')
param storageAccountName string

@description('The existing Event Hubs namespace.')
param namespaceName string

@description('The existing hub the agents send to.')
param eventHubName string

@description('Principal ID of the scale set\'s agent identity.')
param agentPrincipalId string

@description('Principal ID of the coordinator\'s identity, or empty.')
param senderPrincipalId string = ''

var eventHubsDataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'
var queueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var queueDataMessageSender = 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' existing = {
  parent: namespace
  name: eventHubName
}

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource setSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(hub.id, agentPrincipalId, eventHubsDataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataSender)
    principalId: agentPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder agents of a scale set: send CloudEvents to this hub only'
  }
}

resource setQueues 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, agentPrincipalId, queueDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', queueDataContributor)
    principalId: agentPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder agents of an autoscaled scale set: each instance makes and reads its own approval queue'
  }
}

resource coordinatorSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(senderPrincipalId)) {
  name: guid(account.id, senderPrincipalId, queueDataMessageSender)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', queueDataMessageSender)
    principalId: senderPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: send approvals to the queues scale-set instances make'
  }
}
