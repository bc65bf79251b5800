// Event Hubs namespace and hub that receive the agents' CloudEvents.
// Entra ID only (local/SAS auth disabled), TLS 1.2 minimum, auto-inflate (up to
// maximumThroughputUnits) and an alert on throttled requests, a "dashboards" consumer group (and a
// "coordinator" one with a coordinator), and the coordinator's role assignments: Azure Event Hubs
// Data Receiver and Data Sender, scoped to this one hub, not the namespace. Each agent's Data Sender
// assignment on the hub is made with its queue (vm-hub-access.bicep).

@description('Azure region of the namespace.')
param location string

@description('Event Hubs namespace name (globally unique, 6-50 characters).')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('Event hub name.')
param eventHubName string

@description('Partitions of the hub; events are keyed by vmId, so more partitions spread a large fleet.')
@minValue(1)
@maxValue(32)
param partitionCount int = 4

@description('How long the hub keeps events, in days (7, the most the Standard tier keeps: what a coordinator that lost its snapshots rebuilds from).')
@minValue(1)
@maxValue(7)
param messageRetentionInDays int = 7

@description('Principal ID of the coordinator\'s identity (receive from the hub), or empty for none.')
param receiverPrincipalId string = ''

@description('Names of the coordinator\'s shards ([shard] name, docs/coordinator.md "Shards"): each reads in a consumer group of its own, coordinator-<shard>; empty: one coordinator, which reads in "coordinator". Standard allows 20 consumer groups a hub.')
@maxLength(18)
param coordinatorShards array = []

@description('Subnet resource IDs allowed to reach the namespace (need the Microsoft.EventHub service endpoint). With none and no IP ranges, every network may connect; authentication is Entra ID only either way.')
param allowedSubnetIds array = []

@description('Public IP ranges (CIDR) allowed to reach the namespace, e.g. the coordinator\'s egress.')
param allowedIpRanges array = []

@description('Public network access: Enabled (limited by the network rules when subnets or IP ranges are given) or Disabled (private endpoints only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Subnet for a private endpoint of the namespace; empty for none.')
param privateEndpointSubnetId string = ''

@description('Private DNS zone (privatelink.servicebus.windows.net) for the private endpoint; empty: your DNS resolves it otherwise.')
param privateDnsZoneId string = ''

@description('Let the namespace add throughput units by itself when the agents\' traffic needs them (auto-inflate), up to maximumThroughputUnits.')
param autoInflate bool = true

@description('The most throughput units auto-inflate may reach (a unit takes 1 MB/s or 1,000 events/s in).')
@minValue(1)
@maxValue(40)
param maximumThroughputUnits int = 10

@description('Action groups the throttling alert notifies; empty: it fires in the portal only.')
param alertActionGroupIds array = []

@description('Log Analytics workspace for the namespace\'s operational and audit logs; empty for none.')
param logAnalyticsWorkspaceId string = ''

@description('Tags for every resource.')
param tags object = {}

// Built-in data-plane roles (IDs are the same in every tenant).
var eventHubsDataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'
var eventHubsDataReceiver = 'a638d3c7-ab3a-418d-83e6-5f17a39d4fde'
var restrictNetwork = !empty(allowedSubnetIds) || !empty(allowedIpRanges)

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  tags: tags
  sku: {
    name: 'Standard'
    tier: 'Standard'
    capacity: 1
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
    zoneRedundant: true
    kafkaEnabled: true
    isAutoInflateEnabled: autoInflate
    maximumThroughputUnits: autoInflate ? maximumThroughputUnits : 0
  }
}

resource networkRules 'Microsoft.EventHub/namespaces/networkRuleSets@2024-01-01' = {
  parent: namespace
  name: 'default'
  properties: {
    defaultAction: restrictNetwork ? 'Deny' : 'Allow'
    publicNetworkAccess: publicNetworkAccess
    trustedServiceAccessEnabled: false  // Azure's feed has a namespace of its own (feed-namespace.bicep)
    virtualNetworkRules: [for subnetId in allowedSubnetIds: {
      subnet: {
        id: subnetId
      }
      ignoreMissingVnetServiceEndpoint: false
    }]
    ipRules: [for range in allowedIpRanges: {
      ipMask: range
      action: 'Allow'
    }]
  }
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' = {
  parent: namespace
  name: eventHubName
  properties: {
    partitionCount: partitionCount
    messageRetentionInDays: messageRetentionInDays
  }
}

resource dashboards 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = {
  parent: hub
  name: 'dashboards'
  properties: {
    userMetadata: 'Central dashboards and alerting read se-forwarder CloudEvents here.'
  }
}

resource coordinatorGroup 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = if (!empty(receiverPrincipalId)) {
  parent: hub
  name: 'coordinator'
  properties: {
    userMetadata: 'The fleet coordinator reads se-forwarder CloudEvents here.'
  }
}

// A shard reads every partition in a group of its own: the shards of one hub (and each one's
// standby) never share the five readers a partition allows a group.
resource shardGroups 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = [for shard in coordinatorShards: {
  parent: hub
  name: 'coordinator-${shard}'
  properties: {
    userMetadata: 'Coordinator shard ${shard} reads se-forwarder CloudEvents here.'
  }
}]

resource coordinatorReceives 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(receiverPrincipalId)) {
  name: guid(hub.id, receiverPrincipalId, eventHubsDataReceiver)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataReceiver)
    principalId: receiverPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: read CloudEvents from this hub only'
  }
}

// The coordinator publishes its decisions (approve, defer, pause, ...) to the same hub, so that a
// standby or a restarted instance rebuilds the same state from it.
resource coordinatorSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(receiverPrincipalId)) {
  name: guid(hub.id, receiverPrincipalId, eventHubsDataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataSender)
    principalId: receiverPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: publish its decisions to this hub only'
  }
}

module namespaceEndpoint 'private-endpoint.bicep' = if (!empty(privateEndpointSubnetId)) {
  name: take('se-forwarder-pe-${namespace.name}', 64)
  params: {
    name: '${namespace.name}-namespace'
    location: location
    subnetId: privateEndpointSubnetId
    targetId: namespace.id
    groupId: 'namespace'
    privateDnsZoneId: privateDnsZoneId
    tags: tags
  }
}

resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(logAnalyticsWorkspaceId)) {
  name: 'se-forwarder-audit'
  scope: namespace
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
  }
}

// Throttling is alerted on: the agents' sinks retry, but the coordinator's fold falls behind.
module throttling 'throttling-alert.bicep' = {
  name: take('se-forwarder-throttling-${namespace.name}', 64)
  params: {
    name: '${namespace.name}-throttled'
    namespaceId: namespace.id
    actionGroupIds: alertActionGroupIds
    tags: tags
  }
}

@description('Namespace host name, e.g. ns.servicebus.windows.net (fully_qualified_namespace).')
output fullyQualifiedNamespace string = replace(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':443/', '')

@description('Event hub name.')
output eventHubName string = hub.name

@description('Consumer group for dashboards.')
output dashboardsConsumerGroup string = dashboards.name

@description('Name of the coordinator\'s consumer group, or empty.')
output coordinatorConsumerGroup string = empty(receiverPrincipalId) ? '' : coordinatorGroup.name

@description('Consumer groups of the coordinator\'s shards ([eventhub] consumer_group of each), in coordinatorShards\' order.')
output coordinatorShardGroups array = [for (shard, i) in coordinatorShards: shardGroups[i].name]

@description('Resource ID of the hub.')
output eventHubId string = hub.id

@description('Name of the namespace.')
output namespaceName string = namespace.name
