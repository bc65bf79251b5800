// A key vault for the coordinator's approval signing key (an Ed25519 private key, PKCS#8 PEM, from
// `se-forwarder fleet keygen`): Key Vault keys have no Ed25519, so it is a secret. RBAC only, purge
// protection and soft delete on, and one role assignment: Key Vault Secrets User for the
// coordinator's identity on that secret's vault. The secret itself is set by the operator
// (`az keyvault secret set --file`), never passed through a template parameter, so it appears in
// no deployment's history.

@description('Region of the vault.')
param location string

@description('Name of the vault (3-24 letters, digits and hyphens, globally unique).')
@minLength(3)
@maxLength(24)
param vaultName string

@description('Principal ID of the coordinator\'s identity.')
param coordinatorPrincipalId string

@description('Public network access: Enabled or Disabled (private endpoint only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Subnet for a private endpoint of the vault; empty for none.')
param privateEndpointSubnetId string = ''

@description('Private DNS zone (privatelink.vaultcore.azure.net) for the private endpoint; empty for none.')
param privateDnsZoneId string = ''

@description('Tags for every resource.')
param tags object = {}

var keyVaultSecretsUser = '4633458b-17de-408a-b874-0445c86b69e6'

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  // checkov:skip=CKV_AZURE_189: public network access is the operator's choice (hub.bicep publicNetworkAccess, Disabled with a private endpoint); with it on, the vault answers only Entra ID principals with a role, and one identity may read its secrets.
  // checkov:skip=CKV_AZURE_109: network rules are the operator's choice here (publicNetworkAccess, a private endpoint); access is Entra ID (RBAC) only, with one role for one identity.
  name: vaultName
  location: location
  tags: tags
  properties: {
    tenantId: subscription().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 90
    enablePurgeProtection: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      defaultAction: publicNetworkAccess == 'Enabled' ? 'Allow' : 'Deny'
      bypass: 'None'
    }
  }
}

resource coordinatorReads 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(vault.id, coordinatorPrincipalId, keyVaultSecretsUser)
  scope: vault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', keyVaultSecretsUser)
    principalId: coordinatorPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: read its signing key from this vault only'
  }
}

module vaultEndpoint 'private-endpoint.bicep' = if (!empty(privateEndpointSubnetId)) {
  name: take('se-forwarder-pe-${vault.name}', 64)
  params: {
    name: '${vault.name}-vault'
    location: location
    subnetId: privateEndpointSubnetId
    targetId: vault.id
    groupId: 'vault'
    privateDnsZoneId: privateDnsZoneId
    tags: tags
  }
}

@description('The vault\'s URI (https://NAME.vault.azure.net/).')
output vaultUri string = vault.properties.vaultUri

@description('Name of the vault.')
output vaultName string = vault.name
