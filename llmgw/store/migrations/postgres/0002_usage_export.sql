-- Usage is read in pages ordered by (at, id): exports and the admin API's
-- listings. With an index on `at` alone, each page sorted every row after
-- it before taking the first thousand, so an export of a month grew with
-- the square of its rows. (at, id) serves every query `usage_at` did.
CREATE INDEX usage_at_id ON usage (at, id);
DROP INDEX usage_at;
