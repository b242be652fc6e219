"""What an operator can do to a namespace (pause, resume, open the next batch, requeue failed tasks): the
command (cli/) and the dashboard (web/) both act through here."""
