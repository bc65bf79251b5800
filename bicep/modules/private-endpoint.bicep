// A private endpoint of one service of a resource (Event Hubs namespace, storage queue or blob
// service, key vault) in a subnet of yours, and optionally its record in a private DNS zone you
// already have (privatelink.servicebus.windows.net, privatelink.queue.core.windows.net, ...).

@description('Name of the private endpoint.')
param name string

@description('Region of the private endpoint: the subnet\'s.')
param location string

@description('Resource ID of the subnet.')
param subnetId string

@description('Resource ID of the resource the endpoint reaches.')
param targetId string

@description('Its sub-resource: namespace, queue, blob or vault.')
@allowed([
  'namespace'
  'queue'
  'blob'
  'vault'
])
param groupId string

@description('Resource ID of the private DNS zone that gets the endpoint\'s record; empty for none.')
param privateDnsZoneId string = ''

@description('Tags for the endpoint.')
param tags object = {}

resource endpoint 'Microsoft.Network/privateEndpoints@2024-05-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    subnet: {
      id: subnetId
    }
    privateLinkServiceConnections: [
      {
        name: name
        properties: {
          privateLinkServiceId: targetId
          groupIds: [
            groupId
          ]
        }
      }
    ]
  }
}

resource zoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-05-01' = if (!empty(privateDnsZoneId)) {
  parent: endpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: groupId
        properties: {
          privateDnsZoneId: privateDnsZoneId
        }
      }
    ]
  }
}

@description('Resource ID of the private endpoint.')
output id string = endpoint.id
