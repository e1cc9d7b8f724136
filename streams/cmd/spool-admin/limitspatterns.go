package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spoolq/spool/shared/limits"
)

// ruleFile reads the rule of limits set --file: the JSON document of
// docs/contract.md, typed by --type or its own "type". The limit flags
// cannot be mixed with it.
func ruleFile(fs *flag.FlagSet, path, typ string) (limits.Rule, error) {
	var mixed []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "file", "type", "url", "json", "timeout", "v":
		default:
			mixed = append(mixed, "--"+f.Name)
		}
	})
	if len(mixed) > 0 {
		return limits.Rule{}, fmt.Errorf("--file holds the whole rule: drop %s or put them in the document", strings.Join(mixed, ", "))
	}
	var (
		data []byte
		err  error
	)
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return limits.Rule{}, fmt.Errorf("--file: %w", err)
	}
	if typ == "" {
		var doc struct {
			Type string `json:"type"`
		}
		// Decode reports a document that is no JSON object.
		_ = json.Unmarshal(data, &doc)
		if typ = doc.Type; typ == "" {
			return limits.Rule{}, errors.New("--file: the document has no \"type\": give it one or use --type")
		}
	}
	if err := limits.ValidateName(typ); err != nil {
		return limits.Rule{}, fmt.Errorf("%w: type: %w", limits.ErrInvalidRule, err)
	}
	return limits.Decode(limits.RuleKey(typ), data)
}

// explain prints which rule governs typ and, with a key, the per-key
// limits of the key under it.
func explain(ctx context.Context, st *limits.Store, typ, key string, w io.Writer) error {
	r, err := st.Resolve(ctx, typ)
	if errors.Is(err, limits.ErrNoRule) {
		_, err = fmt.Fprintf(w, "%s: no rule matches: its tasks run unlimited\n", typ)
		return err
	}
	if err != nil {
		return err
	}
	via := "its own rule"
	if limits.IsPattern(r.Type) {
		via = fmt.Sprintf("the pattern rule %s (limits counted for %s on its own)", r.Type, typ)
	}
	fmt.Fprintf(w, "%s: governed by %s\n  %s\n", typ, via, describe(r))
	if key == "" {
		return nil
	}
	kl := r.KeyLimit(key)
	from := "the rule's key_concurrency and key_rate"
	if p, ok := limits.MatchKey(r.Keys, key); ok {
		from = fmt.Sprintf("key pattern %q", p)
	}
	_, err = fmt.Fprintf(w, "key %q: concurrency %s, rate %s (from %s); fair window %s\n",
		key, orNone(kl.Concurrency), rateText(kl.Rate), from, orNone(r.KeyWindow(key)))
	return err
}

// keysText lists a rule's key patterns and their limits.
func keysText(keys map[string]limits.KeyLimit) string {
	if len(keys) == 0 {
		return "-"
	}
	pats := make([]string, 0, len(keys))
	for p := range keys {
		pats = append(pats, p)
	}
	sort.Strings(pats)
	var parts []string
	for _, p := range pats {
		kl := keys[p]
		parts = append(parts, fmt.Sprintf("%s: concurrency %s, rate %s", p, orNone(kl.Concurrency), rateText(kl.Rate)))
	}
	return strings.Join(parts, "; ")
}

// keyLimitFlag collects --key-limit P=concurrency=N,rate=N/PERIOD,burst=B.
type keyLimitFlag map[string]limits.KeyLimit

func (k *keyLimitFlag) String() string { return fmt.Sprint(map[string]limits.KeyLimit(*k)) }

func (k *keyLimitFlag) Set(v string) error {
	p, spec, ok := strings.Cut(v, "=")
	if !ok || p == "" || spec == "" {
		return fmt.Errorf("--key-limit %q: want PATTERN=LIMITS, such as vip-*=concurrency=5,rate=100/1s", v)
	}
	var kl limits.KeyLimit
	var rate string
	burst := 0
	for part := range strings.SplitSeq(spec, ",") {
		name, val, _ := strings.Cut(part, "=")
		var err error
		switch name {
		case "concurrency":
			kl.Concurrency, err = strconv.Atoi(val)
		case "rate":
			rate = val
		case "burst":
			burst, err = strconv.Atoi(val)
		default:
			return fmt.Errorf("--key-limit %q: %q is not concurrency=N, rate=N/PERIOD or burst=B", v, part)
		}
		if err != nil {
			return fmt.Errorf("--key-limit %q: %s: %q is not a number", v, name, val)
		}
	}
	var err error
	if kl.Rate, err = parseRate("--key-limit "+p+" rate", rate, burst); err != nil {
		return err
	}
	if *k == nil {
		*k = keyLimitFlag{}
	}
	(*k)[p] = kl
	return nil
}
