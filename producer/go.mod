module github.com/spoolq/spool/producer

go 1.26.0

require (
	github.com/spoolq/spool/shared v0.0.0
	github.com/spoolq/spool/streams v0.0.0
)

replace (
	github.com/spoolq/spool/shared => ../shared
	github.com/spoolq/spool/streams => ../streams
)
