// Azure Monitor Logs for the agents' CloudEvents: a data collection endpoint (DCE) and a data
// collection rule (DCR) whose stream declares the row schema (bicep/logs-columns.json) and passes
// rows unchanged into the custom table. Each agent identity's only right here, "Monitoring Metrics
// Publisher" on this one rule, is assigned with its queue (vm-hub-access.bicep).
// The DCE and DCR must be in the workspace's region.

@description('Region of the DCE and DCR: the Log Analytics workspace\'s region.')
param location string

@description('Name of the data collection endpoint.')
param endpointName string

@description('Name of the data collection rule.')
param ruleName string

@description('Resource ID of the Log Analytics workspace that holds the table.')
param workspaceResourceId string

@description('Name of the custom table (from logs-table.bicep, so the table exists first).')
param tableName string

@description('Name of the stream the agents send to (stream in their logs-ingestion sink).')
param streamName string = 'Custom-SeForwarderEvents'

@description('Columns of the stream: [{ name, type }], the same as the table\'s.')
param columns array

@description('Tags for every resource.')
param tags object = {}


resource dce 'Microsoft.Insights/dataCollectionEndpoints@2023-03-11' = {
  name: endpointName
  location: location
  tags: tags
  properties: {
    description: 'se-forwarder: agents send their Scheduled Events CloudEvents here (Entra ID tokens only).'
    networkAcls: {
      publicNetworkAccess: 'Enabled'
    }
  }
}

resource dcr 'Microsoft.Insights/dataCollectionRules@2023-03-11' = {
  name: ruleName
  location: location
  tags: tags
  properties: {
    description: 'se-forwarder: Scheduled Events CloudEvents, one row per event, into ${tableName}.'
    dataCollectionEndpointId: dce.id
    streamDeclarations: {
      '${streamName}': {
        columns: columns
      }
    }
    destinations: {
      logAnalytics: [
        {
          name: 'workspace'
          workspaceResourceId: workspaceResourceId
        }
      ]
    }
    dataFlows: [
      {
        streams: [
          streamName
        ]
        destinations: [
          'workspace'
        ]
        transformKql: 'source'
        outputStream: 'Custom-${tableName}'
      }
    ]
  }
}

@description('Logs ingestion URL of the DCE (endpoint in the agents\' logs-ingestion sink).')
output logsIngestionEndpoint string = dce.properties.logsIngestion.endpoint

@description('Immutable ID of the DCR (rule_id in the agents\' logs-ingestion sink).')
output ruleImmutableId string = dcr.properties.immutableId

@description('Stream the agents send to (stream in their logs-ingestion sink).')
output streamName string = streamName

@description('Name of the DCR (for the agents\' role assignments).')
output ruleName string = dcr.name
