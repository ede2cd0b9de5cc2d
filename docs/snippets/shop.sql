-- A schema of your own: the statements `gcloud spanner databases create --ddl-file` takes.
CREATE TABLE Customers (
  CustomerId INT64 NOT NULL,
  Name STRING(MAX),
  Email STRING(MAX),
) PRIMARY KEY (CustomerId);

CREATE TABLE Orders (
  OrderId STRING(36) NOT NULL,
  CustomerId INT64,
  Amount NUMERIC,
  PlacedAt TIMESTAMP,
) PRIMARY KEY (OrderId);

-- The change stream the pipeline reads; its retention bounds how far back a window may be re-read.
CREATE CHANGE STREAM ShopChanges FOR ALL OPTIONS (retention_period = '7d');
