module github.com/spoolq/spool/examples/go

go 1.26.0

require (
	github.com/nats-io/nats.go v1.55.0
	github.com/spoolq/spool/consumer v0.1.0
	github.com/spoolq/spool/producer v0.1.0
	github.com/spoolq/spool/shared v0.1.0
)
