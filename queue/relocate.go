package queue

import (
	"context"
	"errors"
	"fmt"
)

// Relocate sends entries to dest and deletes their originals, received
// from src (receipts[i] is entries[i]'s), and returns each entry's send
// result. Where b is a Mover that is one step: an entry whose send fails
// stays where it was, and no duplicate can follow. Elsewhere it sends,
// then deletes the originals of the entries sent; deleteErr then reports
// deletes that failed (those jobs are in both queues, and a duplicate may
// follow). Nothing is lost either way. err is for the whole call, when
// nothing was sent. The drainer's moves and the admin API's replays use
// it.
func Relocate(ctx context.Context, b Backend, src, dest string, entries []SendEntry, receipts []string) (res []SendResult, deleteErr, err error) {
	if mover, ok := b.(Mover); ok {
		moves := make([]MoveEntry, len(entries))
		for i, e := range entries {
			moves[i] = MoveEntry{ReceiptHandle: receipts[i], SendEntry: e}
		}
		res, err = mover.Move(ctx, &MoveParams{From: src, To: dest, Entries: moves})
		return res, nil, err
	}
	if res, err = b.Send(ctx, &SendParams{Queue: dest, Entries: entries}); err != nil {
		return nil, nil, err
	}
	var sent []string
	for i, r := range res {
		if r.Err == nil {
			sent = append(sent, receipts[i])
		}
	}
	if len(sent) == 0 {
		return res, nil, nil
	}
	errs, err := b.Delete(ctx, &DeleteParams{Queue: src, ReceiptHandles: sent})
	if err != nil {
		return res, fmt.Errorf("delete %d originals from %s: %w", len(sent), src, err), nil
	}
	var failed []error
	for _, e := range errs {
		if e != nil {
			failed = append(failed, e)
		}
	}
	if len(failed) > 0 {
		deleteErr = fmt.Errorf("delete %d of %d originals from %s: %w", len(failed), len(sent), src, errors.Join(failed...))
	}
	return res, deleteErr, nil
}
