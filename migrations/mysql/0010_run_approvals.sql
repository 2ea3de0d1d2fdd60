-- Run approvals (issue 20, DESIGN §9): a run moved to `awaiting_approval` with an
-- approval holds that approval's id until its continuation (approve, reject or
-- recall) moves it on. While it is set, the producer cannot move the run: only the
-- approval's continuation, guarded on it, can.
ALTER TABLE runs ADD COLUMN approval_id TEXT;
