// Package deployconf holds tests that load the nats-server configurations
// in deploy/ with the server's own parser, so a typo or a lost durability
// setting fails CI instead of a production rollout.
package deployconf
