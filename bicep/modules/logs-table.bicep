// The Log Analytics custom table that receives every agent's CloudEvents as rows (one row per
// event; the columns are bicep/logs-columns.json, the same as the data collection rule's stream and
// the agent's row schema, se_forwarder/sinks/logs_rows.py). Deployed in the workspace's resource
// group, which may differ from the rest of the deployment's.

@description('Name of the existing Log Analytics workspace.')
param workspaceName string

@description('Name of the custom table (ends in _CL).')
param tableName string = 'SeForwarderEvents_CL'

@description('Columns of the table: [{ name, type }].')
param columns array

@description('Days the rows stay available to queries (interactive retention).')
@minValue(4)
@maxValue(730)
param retentionInDays int = 30

resource workspace 'Microsoft.OperationalInsights/workspaces@2022-10-01' existing = {
  name: workspaceName
}

resource table 'Microsoft.OperationalInsights/workspaces/tables@2022-10-01' = {
  parent: workspace
  name: tableName
  properties: {
    plan: 'Analytics'
    retentionInDays: retentionInDays
    totalRetentionInDays: retentionInDays
    schema: {
      name: tableName
      columns: columns
    }
  }
}

@description('Name of the table, for the data collection rule\'s output stream.')
output tableName string = table.name
