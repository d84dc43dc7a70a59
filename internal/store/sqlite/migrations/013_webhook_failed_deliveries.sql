-- The failed deliveries are counted for /metrics and the webhook list (per
-- subscription and in all); the pending ones have partial indexes already,
-- and without this one each count of the failed read every delivery kept.
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (webhook_id) WHERE state = 'failed';
