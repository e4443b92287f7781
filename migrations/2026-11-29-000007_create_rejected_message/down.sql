DROP TABLE rejected_message;
