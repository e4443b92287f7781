DROP TABLE reconcile_discrepancy;
