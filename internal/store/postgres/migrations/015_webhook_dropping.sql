-- A subscription whose pending deliveries reached webhook_delivery.max_pending
-- drops the events it would be sent from dropping_since on, until its
-- backlog is down to half of that. drop_noted is the dropping_since that
-- was last logged (NULL: the end of dropping was), so that each change is
-- logged once, by one orchestrator.
ALTER TABLE webhooks ADD COLUMN dropping_since timestamptz;
ALTER TABLE webhooks ADD COLUMN drop_noted timestamptz;
