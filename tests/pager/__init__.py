"""PagerDuty and Opsgenie: the alert bodies, the sinks' settings, and the sinks against local stand-ins."""
