DROP TABLE unwritable_order;
