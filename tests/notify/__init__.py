"""Teams and Slack messages: the formatter, and the webhook sink's chat formats against local stand-ins."""
