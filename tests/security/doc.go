// Package security proves the access control and transport security that
// deploy/nats ships: servers are started in process from the deployed
// configuration files, the topology is provisioned as the admin role, and
// raw nats.go clients check, role by role, what each may and may not do.
package security
