-- The id the client's answer carried (chatcmpl-…, msg_…, resp_…): what an
-- SDK user has in hand, where x-request-id is rarely seen (issue 11, item 4).
-- Indexed, as `llmgw ctl request ID` looks a request up by it.
ALTER TABLE usage ADD COLUMN answer_id TEXT;
CREATE INDEX usage_answer_id ON usage (answer_id);
