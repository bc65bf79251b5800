// se-forwarder's shared resources, once for the whole fleet, in a resource group of the management
// subscription (docs/deploy.md, "Layout"):
//   - an Event Hubs namespace and hub (Entra ID only, TLS 1.2) with a "dashboards" consumer group;
//   - a storage account (shared keys off, HTTPS only) for the approval queues (one per VM, made by
//     agents.bicep with that VM's rights);
//   - optionally the coordinator: its identity, "Azure Event Hubs Data Receiver" and "Azure Event Hubs
//     Data Sender" on the hub (it reads the agents' events and publishes its decisions there), the
//     "coordinator" consumer group (with coordinatorShards, one "coordinator-<shard>" per shard),
//     its blob container (leader lease and snapshots; versioning and soft delete) where it is
//     "Storage Blob Data Contributor", and optionally a key vault for its signing key ("Key Vault
//     Secrets User" on that vault);
//   - optionally (deployAzureFeed) the Azure feed hub, in an Event Hubs namespace of its own so that
//     the agents' traffic never takes its throughput (feed-namespace.bicep), which each VM
//     subscription's Event Grid topic feeds (agents.bicep);
//   - the agents' namespace auto-inflates (up to eventHubsMaximumThroughputUnits), and each namespace
//     has an alert on throttled requests (alertActionGroupIds notified);
//   - optionally (deployLogsIngestion) Azure Monitor Logs: a custom table in logAnalyticsWorkspaceId,
//     a data collection endpoint and rule;
//   - optionally private endpoints and public network access turned off.
// Its outputs are agents.bicep's inputs (hub.outputs.json, docs/deploy.md):
//   az deployment group create -g RG -f bicep/hub.bicep -p deployCoordinator=true
targetScope = 'resourceGroup'

@description('Region of the new resources.')
param location string = resourceGroup().location

@description('Lowercase letters and digits that start every resource name.')
@minLength(3)
@maxLength(11)
param namePrefix string = 'sefwd'

@description('Event hub that receives the CloudEvents.')
param eventHubName string = 'scheduled-events'

@description('Partitions of the hub.')
@minValue(1)
@maxValue(32)
param eventHubPartitionCount int = 4

@description('Days the hub keeps events: 7 (the most on Standard) is what a coordinator that lost its snapshots rebuilds pauses and holds from (docs/deploy.md, "State").')
@minValue(1)
@maxValue(7)
param eventHubRetentionDays int = 7

@description('Let the agents\' namespace add throughput units by itself when their traffic needs them (auto-inflate).')
param eventHubsAutoInflate bool = true

@description('The most throughput units the agents\' namespace may auto-inflate to (a unit takes 1 MB/s or 1,000 events/s in).')
@minValue(1)
@maxValue(40)
param eventHubsMaximumThroughputUnits int = 10

@description('Action groups (resource IDs) that the alerts on throttled Event Hubs requests notify; empty: they fire in the portal only.')
param alertActionGroupIds array = []

@description('Subnet resource IDs (the VMs\', the coordinator\'s) allowed to reach Event Hubs and Storage over their public endpoints; they need the Microsoft.EventHub and Microsoft.Storage service endpoints. Empty together with allowedIpRanges: any network may connect (authentication is Entra ID only either way).')
param allowedSubnetIds array = []

@description('Public IP ranges (CIDR) allowed to reach Event Hubs and Storage, e.g. the coordinator\'s egress.')
param allowedIpRanges array = []

@description('Public network access of the namespace, the storage account and the key vault: Disabled leaves only private endpoints (privateEndpointSubnetId).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Subnet for private endpoints of the namespace, the queue and blob services and the key vault; empty for none.')
param privateEndpointSubnetId string = ''

@description('Private DNS zones (resource IDs) that get the endpoints\' records: { eventhubs, queue, blob, vault }, each optional (privatelink.servicebus.windows.net, privatelink.queue.core.windows.net, privatelink.blob.core.windows.net, privatelink.vaultcore.azure.net).')
param privateDnsZoneIds object = {}

@description('Also create the coordinator\'s identity with receive and send rights on the hub, its consumer group and its blob container.')
param deployCoordinator bool = false

@description('With the coordinator split into shards by subscription (docs/coordinator.md, "Shards"): their names, each the [shard] name of one; each gets a consumer group coordinator-<shard> on the hub (and on the Azure feed hub). The shards share the coordinator\'s identity and container (their lease and snapshot blobs carry their names). A shard on a hub of its own: deploy this template once per hub.')
@maxLength(18)
param coordinatorShards array = []

@description('With the coordinator: a key vault for its signing key, readable by the coordinator only.')
param deployKeyVault bool = false

@description('Days an overwritten or deleted snapshot of the coordinator can be restored (blob versioning and soft delete).')
@minValue(1)
@maxValue(365)
param coordinatorStateRetentionDays int = 14

@description('Also create the Azure feed hub (needs deployCoordinator); each VM subscription\'s topic is agents.bicep\'s (deployAzureFeed there).')
param deployAzureFeed bool = false

@description('Event hub of Azure\'s feed ([azure.feed] eventhub).')
param azureFeedHubName string = 'azure-feed'

@description('Log Analytics workspace for the queues\' and the namespace\'s audit logs; empty for none.')
param logAnalyticsWorkspaceId string = ''

@description('Also create Azure Monitor Logs for the agents\' events: table SeForwarderEvents_CL in logAnalyticsWorkspaceId (required then), a data collection endpoint and rule.')
param deployLogsIngestion bool = false

@description('Region of the data collection endpoint and rule: the workspace\'s region.')
param logsLocation string = location

@description('Days the events stay in SeForwarderEvents_CL.')
@minValue(4)
@maxValue(730)
param logsRetentionDays int = 30

@description('Tags for every new resource.')
param tags object = {}

var prefix = toLower(namePrefix)
var suffix = uniqueString(resourceGroup().id, prefix)
// The workspace's subscription, resource group and name, from its resource ID (a placeholder
// without one, so that nothing is indexed out of range when Logs are off).
var workspaceParts = split(empty(logAnalyticsWorkspaceId) ? '/subscriptions/none/resourceGroups/none/providers/Microsoft.OperationalInsights/workspaces/none' : logAnalyticsWorkspaceId, '/')
var logsColumns = loadJsonContent('logs-columns.json')

resource coordinator 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = if (deployCoordinator) {
  name: '${prefix}-coordinator'
  location: location
  tags: tags
}

var coordinatorPrincipalId = deployCoordinator ? coordinator.properties.principalId : ''

module eventHubs 'modules/eventhubs.bicep' = {
  name: 'se-forwarder-eventhubs'
  params: {
    location: location
    namespaceName: '${prefix}-eh-${suffix}'
    eventHubName: eventHubName
    partitionCount: eventHubPartitionCount
    messageRetentionInDays: eventHubRetentionDays
    receiverPrincipalId: coordinatorPrincipalId
    autoInflate: eventHubsAutoInflate
    maximumThroughputUnits: eventHubsMaximumThroughputUnits
    alertActionGroupIds: alertActionGroupIds
    coordinatorShards: deployCoordinator ? coordinatorShards : []
    allowedSubnetIds: allowedSubnetIds
    allowedIpRanges: allowedIpRanges
    publicNetworkAccess: publicNetworkAccess
    privateEndpointSubnetId: privateEndpointSubnetId
    privateDnsZoneId: privateDnsZoneIds.?eventhubs ?? ''
    logAnalyticsWorkspaceId: logAnalyticsWorkspaceId
    tags: tags
  }
}

module approvalQueues 'modules/approval-queues.bicep' = {
  name: 'se-forwarder-approval-queues'
  params: {
    location: location
    storageAccountName: take('${prefix}${suffix}', 24)
    senderPrincipalId: coordinatorPrincipalId
    allowedSubnetIds: allowedSubnetIds
    allowedIpRanges: allowedIpRanges
    publicNetworkAccess: publicNetworkAccess
    privateEndpointSubnetId: privateEndpointSubnetId
    privateDnsZoneIds: privateDnsZoneIds
    stateRetentionDays: coordinatorStateRetentionDays
    logAnalyticsWorkspaceId: logAnalyticsWorkspaceId
    tags: tags
  }
}

module keyVault 'modules/keyvault.bicep' = if (deployKeyVault && deployCoordinator) {
  name: 'se-forwarder-keyvault'
  params: {
    location: location
    vaultName: take('${prefix}-kv-${suffix}', 24)
    coordinatorPrincipalId: coordinatorPrincipalId
    publicNetworkAccess: publicNetworkAccess
    privateEndpointSubnetId: privateEndpointSubnetId
    privateDnsZoneId: privateDnsZoneIds.?vault ?? ''
    tags: tags
  }
}

module feedNamespace 'modules/feed-namespace.bicep' = if (deployAzureFeed && deployCoordinator) {
  name: 'se-forwarder-feed-namespace'
  params: {
    location: location
    namespaceName: '${prefix}-feed-${suffix}'
    allowedSubnetIds: allowedSubnetIds
    allowedIpRanges: allowedIpRanges
    publicNetworkAccess: publicNetworkAccess
    privateEndpointSubnetId: privateEndpointSubnetId
    privateDnsZoneId: privateDnsZoneIds.?eventhubs ?? ''
    logAnalyticsWorkspaceId: logAnalyticsWorkspaceId
    alertActionGroupIds: alertActionGroupIds
    tags: tags
  }
}

module azureFeed 'modules/azure-feed.bicep' = if (deployAzureFeed && deployCoordinator) {
  name: 'se-forwarder-azure-feed'
  params: {
    namespaceName: feedNamespace.outputs.namespaceName
    feedHubName: azureFeedHubName
    messageRetentionInDays: eventHubRetentionDays
    coordinatorPrincipalId: coordinatorPrincipalId
    coordinatorShards: coordinatorShards
    tags: tags
  }
}

module logsTable 'modules/logs-table.bicep' = if (deployLogsIngestion) {
  name: 'se-forwarder-logs-table'
  scope: resourceGroup(workspaceParts[2], workspaceParts[4])
  params: {
    workspaceName: workspaceParts[8]
    columns: logsColumns
    retentionInDays: logsRetentionDays
  }
}

module logsIngestion 'modules/logs-ingestion.bicep' = if (deployLogsIngestion) {
  name: 'se-forwarder-logs-ingestion'
  params: {
    location: logsLocation
    endpointName: '${prefix}-dce-${suffix}'
    ruleName: '${prefix}-dcr-${suffix}'
    workspaceResourceId: logAnalyticsWorkspaceId
    tableName: deployLogsIngestion ? logsTable.outputs.tableName : ''
    columns: logsColumns
    tags: tags
  }
}

@description('What agents.bicep needs of this deployment (its parameter hub): save it as hub.outputs.json.')
output hub object = {
  subscriptionId: subscription().subscriptionId
  resourceGroup: resourceGroup().name
  namespaceName: eventHubs.outputs.namespaceName
  eventHubsNamespace: eventHubs.outputs.fullyQualifiedNamespace
  eventHubName: eventHubs.outputs.eventHubName
  storageAccountName: approvalQueues.outputs.storageAccountName
  queueEndpoint: approvalQueues.outputs.queueEndpoint
  coordinatorPrincipalId: coordinatorPrincipalId
  azureFeedNamespaceName: deployAzureFeed && deployCoordinator ? feedNamespace.outputs.namespaceName : ''
  azureFeedHubName: deployAzureFeed && deployCoordinator ? azureFeed.outputs.feedHubName : ''
  logsIngestionEndpoint: deployLogsIngestion ? logsIngestion.outputs.logsIngestionEndpoint : ''
  logsRuleId: deployLogsIngestion ? logsIngestion.outputs.ruleImmutableId : ''
  logsRuleName: deployLogsIngestion ? logsIngestion.outputs.ruleName : ''
  logsStream: deployLogsIngestion ? logsIngestion.outputs.streamName : ''
}

@description('Event Hubs namespace host name (fully_qualified_namespace for consumers).')
output eventHubsNamespace string = eventHubs.outputs.fullyQualifiedNamespace

@description('Event hub with the fleet\'s CloudEvents.')
output eventHubName string = eventHubs.outputs.eventHubName

@description('Consumer group for dashboards.')
output dashboardsConsumerGroup string = eventHubs.outputs.dashboardsConsumerGroup

@description('Consumer group of the coordinator ([eventhub] consumer_group), or empty.')
output coordinatorConsumerGroup string = eventHubs.outputs.coordinatorConsumerGroup

@description('Queue service endpoint ([queues] account_url).')
output queueEndpoint string = approvalQueues.outputs.queueEndpoint

@description('Consumer groups of the coordinator\'s shards on the hub and on the Azure feed hub, in coordinatorShards\' order ([eventhub] and [azure.feed] consumer_group), or empty.')
output coordinatorShardGroups object = {
  hub: eventHubs.outputs.coordinatorShardGroups
  azureFeed: deployAzureFeed && deployCoordinator ? azureFeed.outputs.shardConsumerGroups : []
}

@description('Client ID of the coordinator\'s identity (client_id in coordinator.toml), or empty.')
output coordinatorClientId string = deployCoordinator ? coordinator.properties.clientId : ''

@description('Resource ID of the coordinator\'s identity, to attach to the coordinator\'s VM, or empty.')
output coordinatorIdentityId string = deployCoordinator ? coordinator.id : ''

@description('Blob endpoint and container of the coordinator ([storage] account_url and container), or empty.')
output coordinatorStorage object = {
  accountUrl: deployCoordinator ? approvalQueues.outputs.blobEndpoint : ''
  container: approvalQueues.outputs.coordinatorContainer
}

@description('The key vault for the coordinator\'s signing key (its URI), or empty.')
output keyVaultUri string = deployKeyVault && deployCoordinator ? keyVault.outputs.vaultUri : ''

@description('Azure\'s feed for the coordinator\'s [azure.feed] (fully_qualified_namespace, eventhub, consumer_group), or empty.')
output azureFeed object = {
  namespace: deployAzureFeed && deployCoordinator ? feedNamespace.outputs.fullyQualifiedNamespace : ''
  eventHub: deployAzureFeed && deployCoordinator ? azureFeed.outputs.feedHubName : ''
  consumerGroup: deployAzureFeed && deployCoordinator ? azureFeed.outputs.feedConsumerGroup : ''
}

@description('Logs ingestion URL of the data collection endpoint (endpoint of a logs-ingestion sink), or empty.')
output logsIngestionEndpoint string = deployLogsIngestion ? logsIngestion.outputs.logsIngestionEndpoint : ''

@description('Immutable ID of the data collection rule (rule_id of a logs-ingestion sink), or empty.')
output logsRuleId string = deployLogsIngestion ? logsIngestion.outputs.ruleImmutableId : ''
