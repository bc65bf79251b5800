// Storage account for the approval queues sent by the fleet coordinator (each VM's queue and its
// role assignments: vm-queue.bicep, one deployment per VM). Entra ID only (shared-key access off),
// HTTPS only, TLS 1.2. With a coordinator, also a private blob container for its leader lease and
// fold snapshots, where it is Storage Blob Data Contributor (scoped to that container only), with
// blob versioning and soft delete so that an overwritten or deleted snapshot can be brought back.

@description('Azure region of the storage account.')
param location string

@description('Storage account name (3-24 lowercase letters and digits, globally unique).')
@minLength(3)
@maxLength(24)
param storageAccountName string

@description('Principal ID of the coordinator\'s identity (send to every queue), or empty for none.')
param senderPrincipalId string = ''

@description('Blob container of the coordinator (leader lease and snapshots), created with a coordinator.')
param coordinatorContainerName string = 'se-coordinator'

@description('Redundancy of the account: geo- and zone-redundant by default; Standard_ZRS for regions without GZRS.')
@allowed([
  'Standard_GZRS'
  'Standard_RAGZRS'
  'Standard_GRS'
  'Standard_RAGRS'
  'Standard_ZRS'
])
param skuName string = 'Standard_GZRS'

@description('Subnet resource IDs allowed to reach the account (need the Microsoft.Storage service endpoint). With none and no IP ranges, every network may connect; authentication is Entra ID only either way.')
param allowedSubnetIds array = []

@description('Public IP ranges (CIDR, no /31 or /32: give the bare address) allowed to reach the account.')
param allowedIpRanges array = []

@description('Public network access: Enabled (limited by the network rules when subnets or IP ranges are given) or Disabled (private endpoints only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Subnet for private endpoints of the queue and blob services; empty for none.')
param privateEndpointSubnetId string = ''

@description('Private DNS zones (resource IDs) for the private endpoints: { queue: ..., blob: ... }; each optional (your DNS may resolve them otherwise).')
param privateDnsZoneIds object = {}

@description('Days a deleted or overwritten blob of the coordinator (a snapshot) can be restored (versioning and soft delete).')
@minValue(1)
@maxValue(365)
param stateRetentionDays int = 14

@description('Log Analytics workspace for the queue service\'s read, write and delete logs (who sent or took an approval); empty for none.')
param logAnalyticsWorkspaceId string = ''

@description('Tags for every resource.')
param tags object = {}

// Built-in data-plane roles (IDs are the same in every tenant).
var blobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
var restrictNetwork = !empty(allowedSubnetIds) || !empty(allowedIpRanges)

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: defaultAction is Deny as soon as allowedSubnetIds or allowedIpRanges are given; without them the VMs (in any VNet, without service endpoints) must reach the queues over the public endpoint, where only Entra ID tokens are accepted (allowSharedKeyAccess false) and each identity can read only its own queue.
  // checkov:skip=CKV_AZURE_59: same reason as CKV_AZURE_35: the public endpoint stays reachable for VMs without private endpoints; network rules apply when subnets or IP ranges are given, and access is Entra ID only.
  // checkov:skip=CKV_AZURE_43: the name is computed: take(namePrefix + uniqueString(...), 24) in main.bicep, lowercase letters and digits of 3-24 characters, which this check cannot evaluate.
  name: storageAccountName
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    accessTier: 'Hot'
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    supportsHttpsTrafficOnly: true
    minimumTlsVersion: 'TLS1_2'
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      defaultAction: restrictNetwork ? 'Deny' : 'Allow'
      bypass: 'AzureServices'
      virtualNetworkRules: [for subnetId in allowedSubnetIds: {
        id: subnetId
        action: 'Allow'
      }]
      ipRules: [for range in allowedIpRanges: {
        value: range
        action: 'Allow'
      }]
    }
    encryption: {
      keySource: 'Microsoft.Storage'
      requireInfrastructureEncryption: true
      services: {
        queue: {
          enabled: true
          keyType: 'Account'
        }
        blob: {
          enabled: true
          keyType: 'Account'
        }
      }
    }
  }
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = if (!empty(senderPrincipalId)) {
  parent: account
  name: 'default'
  properties: {
    // The coordinator's snapshots: an overwritten or deleted one can be restored.
    isVersioningEnabled: true
    deleteRetentionPolicy: {
      enabled: true
      days: stateRetentionDays
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: stateRetentionDays
    }
  }
}

resource coordinatorContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = if (!empty(senderPrincipalId)) {
  parent: blobService
  name: coordinatorContainerName
  properties: {
    publicAccess: 'None'
    metadata: {
      purpose: 'se-forwarder coordinator: leader lease and fold snapshots'
    }
  }
}

resource coordinatorKeepsState 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(senderPrincipalId)) {
  name: guid(coordinatorContainer.id, senderPrincipalId, blobDataContributor)
  scope: coordinatorContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributor)
    principalId: senderPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: its leader lease and snapshots in this container only'
  }
}

module queueEndpoint 'private-endpoint.bicep' = if (!empty(privateEndpointSubnetId)) {
  name: take('se-forwarder-pe-queue-${account.name}', 64)
  params: {
    name: '${account.name}-queue'
    location: location
    subnetId: privateEndpointSubnetId
    targetId: account.id
    groupId: 'queue'
    privateDnsZoneId: privateDnsZoneIds.?queue ?? ''
    tags: tags
  }
}

module blobEndpoint 'private-endpoint.bicep' = if (!empty(privateEndpointSubnetId) && !empty(senderPrincipalId)) {
  name: take('se-forwarder-pe-blob-${account.name}', 64)
  params: {
    name: '${account.name}-blob'
    location: location
    subnetId: privateEndpointSubnetId
    targetId: account.id
    groupId: 'blob'
    privateDnsZoneId: privateDnsZoneIds.?blob ?? ''
    tags: tags
  }
}

resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(logAnalyticsWorkspaceId)) {
  name: 'se-forwarder-audit'
  scope: queueService
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        category: 'StorageRead'
        enabled: true
      }
      {
        category: 'StorageWrite'
        enabled: true
      }
      {
        category: 'StorageDelete'
        enabled: true
      }
    ]
  }
}

@description('Queue service endpoint, e.g. https://acct.queue.core.windows.net (account_url).')
output queueEndpoint string = 'https://${account.name}.queue.${environment().suffixes.storage}'

@description('Storage account name.')
output storageAccountName string = account.name


@description('Blob service endpoint, e.g. https://acct.blob.core.windows.net (the coordinator\'s storage.account_url).')
output blobEndpoint string = 'https://${account.name}.blob.${environment().suffixes.storage}'

@description('The coordinator\'s blob container (storage.container), or empty without a coordinator.')
output coordinatorContainer string = empty(senderPrincipalId) ? '' : coordinatorContainerName
