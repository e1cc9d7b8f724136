package security_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestExampleSecretsLockEveryoneOut starts single-auth.conf with
// spool-secrets.example.conf copied as is: the server starts (the example
// defines every variable auth.conf needs), and no role can log in until the
// placeholders are replaced.
func TestExampleSecretsLockEveryoneOut(t *testing.T) {
	t.Parallel()
	dir := copyConfigs(t)
	example, err := os.ReadFile(filepath.Join(deployDir, "spool-secrets.example.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, secretsFile), example, 0o600); err != nil {
		t.Fatal(err)
	}
	url := startFromConfig(t, filepath.Join(dir, "single-auth.conf")).ClientURL()
	for user := range roleVars {
		for _, pw := range []string{"", "REPLACE", "$2a$11$REPLACE.with.the.output.of.nats.server.passwd"} {
			t.Run(user+"/"+pw, func(t *testing.T) {
				t.Parallel()
				nc, err := nats.Connect(url, nats.UserInfo(user, pw), nats.NoReconnect())
				if err == nil {
					nc.Close()
					t.Fatalf("%s logged in with password %q and the example secrets", user, pw)
				}
				if !errors.Is(err, nats.ErrAuthorization) {
					t.Fatalf("error %v, want %v", err, nats.ErrAuthorization)
				}
			})
		}
	}
}
