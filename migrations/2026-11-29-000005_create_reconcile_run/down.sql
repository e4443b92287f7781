DROP TABLE reconcile_run;
