DROP TABLE lease;
