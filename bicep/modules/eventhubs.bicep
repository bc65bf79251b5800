// Event Hubs namespace and hub that receive the agents' CloudEvents.
// Entra ID only (local/SAS auth disabled), TLS 1.2 minimum, a "dashboards" consumer group, and the
// only role assignments on it: Azure Event Hubs Data Sender for each agent identity and (optional)
// Azure Event Hubs Data Receiver for the coordinator, both scoped to this one hub, not the namespace.

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

@description('How long the hub keeps events, in days.')
@minValue(1)
@maxValue(7)
param messageRetentionInDays int = 1

@description('Principal IDs of the agents\' identities: each may send to the hub, nothing else.')
param senderPrincipalIds array

@description('Principal ID of the coordinator\'s identity (receive from the hub), or empty for none.')
param receiverPrincipalId string = ''

@description('Subnet resource IDs allowed to reach the namespace (need the Microsoft.EventHub service endpoint). With none and no IP ranges, every network may connect; authentication is Entra ID only either way.')
param allowedSubnetIds array = []

@description('Public IP ranges (CIDR) allowed to reach the namespace, e.g. the coordinator\'s egress.')
param allowedIpRanges array = []

@description('Let trusted Azure services through the network rules: Event Grid delivering Azure\'s feed (azure-feed.bicep) with its own identity, which holds a role on the feed hub only.')
param allowTrustedServices bool = false

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
    publicNetworkAccess: 'Enabled'
    zoneRedundant: true
    kafkaEnabled: true
  }
}

resource networkRules 'Microsoft.EventHub/namespaces/networkRuleSets@2024-01-01' = {
  parent: namespace
  name: 'default'
  properties: {
    defaultAction: restrictNetwork ? 'Deny' : 'Allow'
    publicNetworkAccess: 'Enabled'
    trustedServiceAccessEnabled: allowTrustedServices
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

resource agentSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in senderPrincipalIds: {
  name: guid(hub.id, principalId, eventHubsDataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataSender)
    principalId: principalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder agent: send CloudEvents to this hub only'
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

@description('Namespace host name, e.g. ns.servicebus.windows.net (fully_qualified_namespace).')
output fullyQualifiedNamespace string = replace(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':443/', '')

@description('Event hub name.')
output eventHubName string = hub.name

@description('Consumer group for dashboards.')
output dashboardsConsumerGroup string = dashboards.name

@description('Resource ID of the hub.')
output eventHubId string = hub.id

@description('Name of the namespace.')
output namespaceName string = namespace.name
