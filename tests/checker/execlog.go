package checker

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The execution log is one line per handler run, "<task-id> <value>
// <worker> <attempt>\n", appended with a single write to a file opened with
// O_APPEND, so a process killed at any point leaves whole lines (at worst
// one torn last line, which ReadExecutionLog skips). Values are quoted with
// strconv.Quote, so they may hold anything.

// FormatExecution returns the log line of one run of task id.
func FormatExecution(id string, e Execution) []byte {
	return fmt.Appendf(nil, "%s %s %s %d\n", id, strconv.Quote(e.Value), e.Worker, e.Attempt)
}

// ReadExecutionLog feeds every whole line of r to c and returns the number
// of lines read and of torn lines skipped.
func ReadExecutionLog(r io.Reader, c *Checker) (lines, torn int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		id, e, ok := parseExecution(sc.Text())
		if !ok {
			torn++
			continue
		}
		lines++
		c.Executed(id, e)
	}
	if err := sc.Err(); err != nil {
		return lines, torn, fmt.Errorf("reading execution log: %w", err)
	}
	return lines, torn, nil
}

func parseExecution(line string) (string, Execution, bool) {
	id, rest, ok := strings.Cut(line, " ")
	if !ok || id == "" {
		return "", Execution{}, false
	}
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", Execution{}, false
	}
	value, err := strconv.Unquote(quoted)
	if err != nil {
		return "", Execution{}, false
	}
	fields := strings.Fields(rest[len(quoted):])
	if len(fields) != 2 {
		return "", Execution{}, false
	}
	attempt, err := strconv.Atoi(fields[1])
	if err != nil {
		return "", Execution{}, false
	}
	return id, Execution{Value: value, Worker: fields[0], Attempt: attempt}, true
}
