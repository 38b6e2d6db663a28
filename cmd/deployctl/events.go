package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

const (
	// eventsWaitDefault is the long-poll wait of events --follow.
	eventsWaitDefault = 30 * time.Second
	// eventsLimitDefault is the page size of the event feed.
	eventsLimitDefault = 100
	// followBackoffMax bounds the pause after a failed poll.
	followBackoffMax = 30 * time.Second
	// followMinPoll is the least time between two polls that brought
	// nothing, in case a server answers long polls at once.
	followMinPoll = time.Second
)

func (a *app) events(ctx context.Context, fs *flag.FlagSet, args []string) error {
	follow := fs.Bool("follow", false, "long-poll forever, resuming from the last cursor (Ctrl-C ends it)")
	tenant := fs.String("tenant", "", "only events of this tenant")
	planID := fs.String("plan", "", "only events of this plan")
	typ := fs.String("type", "", "only events of this type (task.failed, task.completed, ...)")
	after := fs.String("after", "", "start after this cursor (a nextCursor printed before; $ for only the events to come)")
	limit := fs.Int("limit", eventsLimitDefault, "events per request (1.."+strconv.Itoa(httpapi.EventsLimitMax)+")")
	wait := fs.Duration("wait", eventsWaitDefault, "long-poll wait of each --follow request")
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	if *tenant != "" {
		if err := checkTenant(*tenant); err != nil {
			return err
		}
		q.Set("tenantId", *tenant)
	}
	if *planID != "" {
		if err := checkPlanID(*planID); err != nil {
			return err
		}
		q.Set("planId", *planID)
	}
	if *typ != "" {
		if !task.ValidEventType(*typ) {
			return usagef("--type %s is not an event type (like task.failed)", task.Quote(*typ))
		}
		q.Set("type", *typ)
	}
	if *after != "" && !task.ValidFeedCursor(*after) {
		return usagef("--after %s is not a cursor the API returned", task.Quote(*after))
	}
	if *limit < 1 || *limit > httpapi.EventsLimitMax {
		return usagef("--limit %d: want 1..%d", *limit, httpapi.EventsLimitMax)
	}
	q.Set("limit", strconv.Itoa(*limit))
	if *follow {
		if *wait <= 0 {
			return usagef("--wait must be positive")
		}
		return a.follow(ctx, q, *after, *wait)
	}
	events, next, err := a.readEvents(ctx, q, *after, *limit)
	if err != nil {
		return err
	}
	if a.json() {
		raw, err := json.Marshal(eventsPage{Events: events, NextCursor: next})
		if err != nil {
			return fmt.Errorf("encode the events: %w", err)
		}
		return printJSON(a.stdout, raw)
	}
	a.eventHeader()
	for _, raw := range events {
		var e httpapi.FeedEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("decode an event: %w", err)
		}
		if err := a.printEvents([]httpapi.FeedEvent{e}, nil); err != nil {
			return err
		}
	}
	if next != "" {
		fmt.Fprintf(a.stderr, "next: --after %s\n", clean(next))
	}
	return nil
}

// eventsPage is a page of the feed with its events as the server sent them.
type eventsPage struct {
	Events     []json.RawMessage `json:"events"`
	NextCursor string            `json:"nextCursor"`
}

// readEvents reads up to limit events of the feed after cursor after (q
// holds the filters) and the cursor to resume from. A filtered page
// examines a bounded stretch of the feed (ten times its limit) and may come
// back short, even empty, with events further on: a filtered read asks for
// pages of the most the API gives, and reads on from each page's cursor
// until it has limit events or the cursor stops moving (the end of the
// feed, which keeps a bounded number of events).
func (a *app) readEvents(ctx context.Context, q url.Values, after string, limit int) ([]json.RawMessage, string, error) {
	if q.Has("tenantId") || q.Has("planId") || q.Has("type") {
		q.Set("limit", strconv.Itoa(httpapi.EventsLimitMax))
	}
	events := []json.RawMessage{}
	cursor := after
	for {
		if cursor != "" {
			q.Set("after", cursor)
		}
		var page eventsPage
		if _, err := a.cli.getJSON(ctx, "/v1/events", q, &page); err != nil {
			return nil, "", err
		}
		events = append(events, page.Events...)
		if len(events) > limit {
			events = events[:limit]
			// The cursor to resume from is then the last one kept.
			var last struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(events[limit-1], &last); err != nil {
				return nil, "", fmt.Errorf("decode an event: %w", err)
			}
			return events, last.ID, nil
		}
		if len(events) == limit || page.NextCursor == "" || page.NextCursor == cursor {
			return events, page.NextCursor, nil
		}
		cursor = page.NextCursor
	}
}

// follow long-polls the feed until ctx ends (which is success, exit 0:
// Ctrl-C is how a follow stops) and then prints the cursor to resume from. Each request waits up to wait for an event and has
// --timeout on top of that; a failed poll is retried with a growing pause,
// except a 4xx answer, which ends the command.
func (a *app) follow(ctx context.Context, q url.Values, cursor string, wait time.Duration) error {
	q.Set("wait", wait.String())
	a.eventHeader()
	backoff := time.Duration(0)
	for {
		if cursor != "" {
			q.Set("after", cursor)
		}
		start := time.Now()
		var page httpapi.Feed
		raw, err := a.cli.call(ctx, request{method: http.MethodGet, path: "/v1/events", query: q, extra: wait}, &page)
		pause := time.Duration(0)
		switch {
		case ctx.Err() != nil:
			a.resumeHint(cursor)
			return nil
		case err != nil && !transient(err):
			return err
		case err != nil:
			backoff = min(max(2*backoff, time.Second), followBackoffMax)
			pause = backoff
			fmt.Fprintf(a.stderr, "warning: %s (retrying in %s)\n", clean(err.Error()), backoff)
		default:
			backoff = 0
			if err := a.printEvents(page.Events, raw); err != nil {
				return err
			}
			if page.NextCursor != "" {
				cursor = page.NextCursor
			}
			if len(page.Events) == 0 {
				pause = followMinPoll - time.Since(start)
			}
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				a.resumeHint(cursor)
				return nil
			case <-time.After(pause):
			}
		}
	}
}

// resumeHint tells, when a follow ends (Ctrl-C), how to go on from where it
// stopped: on stderr, so that stdout stays the events.
func (a *app) resumeHint(cursor string) {
	if cursor == "" || cursor == "$" {
		// ("$" is no position: resuming from it would skip what came since.)
		fmt.Fprintln(a.stderr, "next: no event read yet: run the same command again")
		return
	}
	fmt.Fprintf(a.stderr, "next: --after %s\n", clean(cursor))
}

// eventHeader starts a table of events (not in JSON mode).
func (a *app) eventHeader() {
	if !a.json() {
		fmt.Fprintf(a.stdout, eventFormat, "AT", "TYPE", "TENANT", "PLAN", "TASK", "DATA")
	}
}

// eventFormat lays events out in fixed columns: a stream cannot be aligned
// after the fact as tabwriter does.
const eventFormat = "%-20s  %-24s  %-16s  %-31s  %-31s  %s\n"

// printEvents prints a page of events: one row each, the time absolute
// (UTC: a feed is a log); with -o json one line each, the events of raw
// (the page's answer) as the server sent them.
func (a *app) printEvents(events []httpapi.FeedEvent, raw []byte) error {
	if a.json() {
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("decode the events: %w", err)
		}
		for _, ev := range page.Events {
			if err := printLine(a.stdout, ev); err != nil {
				return err
			}
		}
		return nil
	}
	for _, e := range events {
		at := "-"
		if !e.At.IsZero() {
			at = e.At.UTC().Format(time.RFC3339)
		}
		var data string
		if len(e.Data) > 0 {
			b, err := json.Marshal(e.Data)
			if err != nil {
				return fmt.Errorf("encode the data of event %s: %w", clean(e.ID), err)
			}
			data = string(b)
		}
		fmt.Fprintf(a.stdout, eventFormat, at, cell(e.Type), cell(e.TenantID), cell(e.PlanID), cell(e.TaskID), cell(data))
	}
	return nil
}
