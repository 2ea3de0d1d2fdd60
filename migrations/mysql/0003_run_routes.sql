-- The delivery routes a run's result goes to (JSON array of route names).
ALTER TABLE runs ADD COLUMN routes VARCHAR(2048) NOT NULL DEFAULT '[]';
