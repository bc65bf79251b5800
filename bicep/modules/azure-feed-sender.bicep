// The right of one Event Grid system topic (one per VM subscription, azure-feed-topic.bicep) to
// deliver to the Azure feed hub: Azure Event Hubs Data Sender on that hub only, deployed in the
// hub's resource group. A module of its own so that the assignment's name can hold the topic
// identity's principal ID (known only once the topic exists): a topic made again gets a new
// identity, and with it a new assignment instead of a clash with the old one's name.

@description('The existing Event Hubs namespace.')
param namespaceName string

@description('The existing Azure feed hub.')
param feedHubName string

@description('Principal ID of the system topic\'s identity.')
param topicPrincipalId string

var eventHubsDataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource feedHub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' existing = {
  parent: namespace
  name: feedHubName
}

resource topicSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(feedHub.id, topicPrincipalId, eventHubsDataSender)
  scope: feedHub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataSender)
    principalId: topicPrincipalId
    principalType: 'ServicePrincipal'
    description: 'Event Grid system topic of maintenance resources: deliver to the Azure feed hub only'
  }
}
