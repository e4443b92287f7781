DROP TABLE stock_flow;
