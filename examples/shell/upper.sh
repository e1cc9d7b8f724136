#!/bin/sh
# A Spool remote handler in shell, served by the nats CLI:
#
#   nats reply 'spool.remote.sh.>' --command "sh examples/shell/upper.sh"
#
# with spool-consumer routing the types to it (SPOOL_REMOTE_ROUTES='sh.>=spool.remote.{type}').
# `nats reply --command` runs this once per request, the payload in
# $NATS_REQUEST_BODY, and replies with what it prints. It cannot set reply
# headers, so every reply is a success (docs/contract.md): a shell handler
# that must fail should be a small program with a NATS client instead.
printf '%s' "$NATS_REQUEST_BODY" | tr '[:lower:]' '[:upper:]'
