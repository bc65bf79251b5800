// Azure's own Scheduled Events feed for the coordinator (preview: docs/azure-feed.md), the hub's
// side, in the hub's resource group:
//   - the Azure feed hub, in a namespace of its own (feed-namespace.bicep: the agents' traffic never
//     takes its throughput), with a "coordinator" consumer group;
//   - Azure Event Hubs Data Receiver on it for the coordinator (it reads, never sends).
// Each VM subscription's Event Grid system topic delivers to it (azure-feed-topic.bicep), and only
// the topics' identities may send to it (azure-feed-sender.bicep): no agent identity has any right
// here.

@description('The existing Event Hubs namespace of Azure\'s feed (feed-namespace.bicep) that gets the feed hub.')
param namespaceName string

@description('Name of the Azure feed hub ([azure.feed] eventhub).')
param feedHubName string = 'azure-feed'

@description('Partitions of the feed hub.')
@minValue(1)
@maxValue(32)
param partitionCount int = 2

@description('How long the feed hub keeps events, in days (the coordinator rebuilds from it after a restart; 7, the most on Standard).')
@minValue(1)
@maxValue(7)
param messageRetentionInDays int = 7

@description('Principal ID of the coordinator\'s identity: it may read the feed hub, nothing else.')
param coordinatorPrincipalId string

@description('Names of the coordinator\'s shards: each reads the feed hub in its own consumer group, coordinator-<shard>.')
@maxLength(18)
param coordinatorShards array = []

@description('Tags for every resource.')
param tags object = {}

// Built-in data-plane roles (IDs are the same in every tenant).
var eventHubsDataReceiver = 'a638d3c7-ab3a-418d-83e6-5f17a39d4fde'

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource feedHub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' = {
  parent: namespace
  name: feedHubName
  properties: {
    partitionCount: partitionCount
    messageRetentionInDays: messageRetentionInDays
  }
}

resource coordinatorGroup 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = {
  parent: feedHub
  name: 'coordinator'
  properties: {
    userMetadata: 'The fleet coordinator reads Azure\'s ScheduledEventEmitted CloudEvents here.'
  }
}

resource shardGroups 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = [for shard in coordinatorShards: {
  parent: feedHub
  name: 'coordinator-${shard}'
  properties: {
    userMetadata: 'Coordinator shard ${shard} reads Azure\'s ScheduledEventEmitted CloudEvents here.'
  }
}]

resource coordinatorReceives 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(feedHub.id, coordinatorPrincipalId, eventHubsDataReceiver)
  scope: feedHub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataReceiver)
    principalId: coordinatorPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: read Azure\'s feed from this hub only'
  }
}

@description('Name of the Azure feed hub ([azure.feed] eventhub).')
output feedHubName string = feedHub.name

@description('Consumer group of the coordinator on the feed hub ([azure.feed] consumer_group).')
output feedConsumerGroup string = coordinatorGroup.name

@description('Consumer groups of the coordinator\'s shards on the feed hub ([azure.feed] consumer_group of each).')
output shardConsumerGroups array = [for (shard, i) in coordinatorShards: shardGroups[i].name]

@description('Resource ID of the feed hub (the system topics\' destination).')
output feedHubId string = feedHub.id
