-- Set while a subscription drops its events: its pending deliveries reached
-- webhook_delivery.max_pending. Events make no delivery for it until the
-- orchestrator finds its backlog down to half of that and clears it.
ALTER TABLE webhooks ADD COLUMN dropping_since timestamptz;
