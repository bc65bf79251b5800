// The agent identity of one uniform scale set, next to it (deploy it in the set's resource group):
// the set is the unit here, so that instances that autoscaling adds later need nothing made for
// them. Attach it to the scale set's model (az vmss identity assign, docs/deploy.md); its rights
// are scale-set-hub-access.bicep's.

@description('Name of the existing scale set.')
param scaleSetName string

@description('Region of the identity.')
param location string

@description('Name of the identity.')
param identityName string

@description('Tags for the identity.')
param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: identityName
  location: location
  tags: tags
}

@description('Name of the scale set this identity is for.')
output scaleSetName string = scaleSetName

@description('Resource ID of the identity (az vmss identity assign --identities).')
output identityId string = identity.id

@description('Client ID of the identity (client_id in the instances\' config).')
output clientId string = identity.properties.clientId

@description('Principal ID of the identity.')
output principalId string = identity.properties.principalId
