// Package cli holds the command-line conventions every Spool command
// follows, so spool-producer, spool-admin, spool-consumer and spool-dev
// behave alike:
//
//   - a bad flag is one line naming the flag, what was wrong and what is
//     allowed (Parse), never the whole usage or the error twice;
//   - -h and --help print the command's usage with every flag on stdout and
//     exit 0 (Exit treats flag.ErrHelp as success);
//   - one-shot commands log only warnings and errors unless -v is given
//     (LogLevel), so a successful command prints its answer and nothing else.
package cli
