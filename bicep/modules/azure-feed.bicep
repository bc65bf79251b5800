// Azure's own Scheduled Events feed for the coordinator (preview: docs/azure-feed.md).
//   - the Azure feed hub, in the agents' namespace but a hub of its own, with a "coordinator"
//     consumer group;
//   - the Event Grid system topic of the subscription's maintenance resources
//     (Microsoft.ResourceNotifications.MaintenanceResources, location global), with a
//     system-assigned identity;
//   - its event subscription: every ScheduledEventEmitted event, in CloudEvents 1.0 schema, delivered
//     to the feed hub with the topic's identity;
//   - the only role assignments on the feed hub: Azure Event Hubs Data Sender for the topic's
//     identity (so only Event Grid can write this input: no agent identity has any right here) and
//     Azure Event Hubs Data Receiver for the coordinator (it reads, never sends).
// A subscription holds one system topic per source and type: deploy this once per subscription.

@description('The existing Event Hubs namespace (eventhubs.bicep) that gets the feed hub.')
param namespaceName string

@description('Name of the Azure feed hub ([azure.feed] eventhub).')
param feedHubName string = 'azure-feed'

@description('Partitions of the feed hub.')
@minValue(1)
@maxValue(32)
param partitionCount int = 2

@description('How long the feed hub keeps events, in days (the coordinator rebuilds from it after a restart).')
@minValue(1)
@maxValue(7)
param messageRetentionInDays int = 1

@description('Principal ID of the coordinator\'s identity: it may read the feed hub, nothing else.')
param coordinatorPrincipalId string

@description('Name of the system topic.')
param systemTopicName string

@description('Tags for every resource.')
param tags object = {}

// Built-in data-plane roles (IDs are the same in every tenant).
var eventHubsDataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'
var eventHubsDataReceiver = 'a638d3c7-ab3a-418d-83e6-5f17a39d4fde'
var topicType = 'Microsoft.ResourceNotifications.MaintenanceResources'

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

resource topic 'Microsoft.EventGrid/systemTopics@2025-02-15' = {
  name: systemTopicName
  location: 'global'
  tags: tags
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    source: subscription().id
    topicType: topicType
  }
}

resource topicSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(feedHub.id, topicType, eventHubsDataSender)
  scope: feedHub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataSender)
    principalId: topic.identity.principalId
    principalType: 'ServicePrincipal'
    description: 'Event Grid system topic of maintenance resources: deliver to the Azure feed hub only'
  }
}

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

resource delivery 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2025-02-15' = {
  parent: topic
  name: 'se-forwarder-coordinator'
  dependsOn: [
    topicSends // Event Grid checks its right to send when the subscription is created
  ]
  properties: {
    eventDeliverySchema: 'CloudEventSchemaV1_0'
    deliveryWithResourceIdentity: {
      identity: {
        type: 'SystemAssigned'
      }
      destination: {
        endpointType: 'EventHub'
        properties: {
          resourceId: feedHub.id
        }
      }
    }
    filter: {
      includedEventTypes: [
        '${topicType}.ScheduledEventEmitted'
      ]
    }
    retryPolicy: {
      maxDeliveryAttempts: 30
      eventTimeToLiveInMinutes: 1440
    }
  }
}

@description('Name of the Azure feed hub ([azure.feed] eventhub).')
output feedHubName string = feedHub.name

@description('Consumer group of the coordinator on the feed hub ([azure.feed] consumer_group).')
output feedConsumerGroup string = coordinatorGroup.name

@description('Resource ID of the system topic.')
output systemTopicId string = topic.id
