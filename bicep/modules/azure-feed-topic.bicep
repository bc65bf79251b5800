// Azure's own Scheduled Events feed, one VM subscription's side (deploy it in a resource group of
// that subscription; a subscription holds one such system topic):
//   - the Event Grid system topic of the subscription's maintenance resources
//     (Microsoft.ResourceNotifications.MaintenanceResources, location global), with a
//     system-assigned identity;
//   - its right to deliver to the Azure feed hub in the hub's resource group (azure-feed-sender.bicep);
//   - its event subscription: every ScheduledEventEmitted event, in CloudEvents 1.0 schema, delivered
//     to the feed hub with the topic's identity;
//   - the same for Resource Health (Microsoft.ResourceNotifications.HealthResources): each VM's
//     AvailabilityStatusChanged event, the coordinator's third word on health, on the same hub.

@description('Name of the system topic.')
param systemTopicName string

@description('Subscription ID of the hub\'s resource group.')
param hubSubscriptionId string

@description('The hub\'s resource group.')
param hubResourceGroup string

@description('The Event Hubs namespace of the feed hub.')
param namespaceName string

@description('The Azure feed hub.')
param feedHubName string

@description('Tags for every resource.')
param tags object = {}

var topicType = 'Microsoft.ResourceNotifications.MaintenanceResources'
var healthTopicType = 'Microsoft.ResourceNotifications.HealthResources'
var feedHubId = resourceId(hubSubscriptionId, hubResourceGroup, 'Microsoft.EventHub/namespaces/eventhubs', namespaceName, feedHubName)

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

module topicSends 'azure-feed-sender.bicep' = {
  name: take('se-forwarder-feed-sender-${uniqueString(subscription().id)}', 64)
  scope: resourceGroup(hubSubscriptionId, hubResourceGroup)
  params: {
    namespaceName: namespaceName
    feedHubName: feedHubName
    topicPrincipalId: topic.identity.principalId
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
          resourceId: feedHubId
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

resource healthTopic 'Microsoft.EventGrid/systemTopics@2025-02-15' = {
  name: '${systemTopicName}-health'
  location: 'global'
  tags: tags
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    source: subscription().id
    topicType: healthTopicType
  }
}

module healthSends 'azure-feed-sender.bicep' = {
  name: take('se-forwarder-health-sender-${uniqueString(subscription().id)}', 64)
  scope: resourceGroup(hubSubscriptionId, hubResourceGroup)
  params: {
    namespaceName: namespaceName
    feedHubName: feedHubName
    topicPrincipalId: healthTopic.identity.principalId
  }
}

resource healthDelivery 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2025-02-15' = {
  parent: healthTopic
  name: 'se-forwarder-coordinator'
  dependsOn: [
    healthSends
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
          resourceId: feedHubId
        }
      }
    }
    filter: {
      includedEventTypes: [
        '${healthTopicType}.AvailabilityStatusChanged'
      ]
      advancedFilters: [
        {
          operatorType: 'StringIn'
          key: 'data.resourceInfo.properties.targetResourceType'
          values: [
            'Microsoft.Compute/virtualMachines'
            'Microsoft.Compute/virtualMachineScaleSets/virtualMachines'
          ]
        }
      ]
    }
    retryPolicy: {
      maxDeliveryAttempts: 30
      eventTimeToLiveInMinutes: 1440
    }
  }
}

@description('Resource ID of the system topic.')
output systemTopicId string = topic.id

@description('Resource ID of the Resource Health system topic.')
output healthTopicId string = healthTopic.id
