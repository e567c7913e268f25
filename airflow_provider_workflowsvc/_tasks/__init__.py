"""What operators, sensors and triggers share: argument checks, the exactly-once submit, files, launches."""
