"""The logs-ingestion sink: rows to a Data Collection Rule stream, against a local HTTPS stand-in."""
