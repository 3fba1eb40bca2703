-- A build whose row committed but whose job may not have reached the queue (the API stopped
-- between the two): 1 from the insert (or the retry that re-queued it) until the job is
-- pushed. Workers re-queue such builds once they are older than KILN_WORKER_ORPHAN_SECS
-- (worker/src/job.rs `requeue_orphans`). Defaulted, so a previous release's inserts (0) are
-- simply never swept.
ALTER TABLE builds ADD COLUMN queue_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX builds_queue_pending ON builds (updated_at) WHERE queue_pending = 1;
