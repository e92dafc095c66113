"""Producer-side progress control: attach to confluent-kafka producers by configuration."""
