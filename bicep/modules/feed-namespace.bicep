// The Azure feed's own Event Hubs namespace (azure-feed.bicep puts the feed hub in it), so that the
// agents' traffic, however large or hostile, never takes the throughput Azure's feed needs: the
// agents' namespace can throttle without delaying Azure's word. Entra ID only, TLS 1.2, trusted
// Azure services let through the network rules (Event Grid delivers from outside your networks with
// its own identity), a throttling alert, and optionally a private endpoint and audit logs. No agent
// identity has any right in it.

@description('Azure region of the namespace.')
param location string

@description('Event Hubs namespace name (globally unique, 6-50 characters).')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('Throughput units: Azure\'s feed is a few events per VM and maintenance, one is plenty.')
@minValue(1)
@maxValue(40)
param capacity int = 1

@description('Subnet resource IDs allowed to reach the namespace (the coordinator\'s).')
param allowedSubnetIds array = []

@description('Public IP ranges (CIDR) allowed to reach the namespace, e.g. the coordinator\'s egress.')
param allowedIpRanges array = []

@description('Public network access: Enabled (limited by the network rules) or Disabled (private endpoints and trusted services only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Subnet for a private endpoint of the namespace; empty for none.')
param privateEndpointSubnetId string = ''

@description('Private DNS zone (privatelink.servicebus.windows.net) for the private endpoint; empty for none.')
param privateDnsZoneId string = ''

@description('Log Analytics workspace for the namespace\'s audit logs; empty for none.')
param logAnalyticsWorkspaceId string = ''

@description('Action groups the throttling alert notifies; empty: it fires in the portal only.')
param alertActionGroupIds array = []

@description('Tags for every resource.')
param tags object = {}

var restrictNetwork = !empty(allowedSubnetIds) || !empty(allowedIpRanges)

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  tags: tags
  sku: {
    name: 'Standard'
    tier: 'Standard'
    capacity: capacity
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
    zoneRedundant: true
    kafkaEnabled: false
  }
}

resource networkRules 'Microsoft.EventHub/namespaces/networkRuleSets@2024-01-01' = {
  parent: namespace
  name: 'default'
  properties: {
    defaultAction: restrictNetwork ? 'Deny' : 'Allow'
    publicNetworkAccess: publicNetworkAccess
    trustedServiceAccessEnabled: true
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

module throttling 'throttling-alert.bicep' = {
  name: take('se-forwarder-throttling-${namespace.name}', 64)
  params: {
    name: '${namespace.name}-throttled'
    namespaceId: namespace.id
    actionGroupIds: alertActionGroupIds
    tags: tags
  }
}

@description('Name of the namespace.')
output namespaceName string = namespace.name

@description('Namespace host name ([azure.feed] fully_qualified_namespace).')
output fullyQualifiedNamespace string = replace(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':443/', '')
