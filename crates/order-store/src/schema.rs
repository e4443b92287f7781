//! The tables of `migrations/`, as diesel sees them. Kept by hand (no `diesel print-schema`
//! in the build): a migration that changes a table changes this file in the same commit.

diesel::table! {
    use diesel::sql_types::*;

    products (id) {
        id -> Unsigned<BigInt>,
        #[max_length = 200]
        name -> Varchar,
        initial_stock -> BigInt,
        per_user_limit -> Unsigned<Integer>,
        price_cents -> Unsigned<BigInt>,
        starts_at -> Nullable<Datetime>,
        ends_at -> Nullable<Datetime>,
        created_at -> Datetime,
        updated_at -> Datetime,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    product_stock (product_id) {
        product_id -> Unsigned<BigInt>,
        stock -> BigInt,
        version -> BigInt,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    orders (id) {
        id -> Unsigned<BigInt>,
        #[max_length = 64]
        order_token -> Varchar,
        user_id -> Unsigned<BigInt>,
        product_id -> Unsigned<BigInt>,
        quantity -> Unsigned<Integer>,
        #[max_length = 16]
        status -> Varchar,
        reserved_at -> Datetime,
        pay_by -> Nullable<Datetime>,
        closed_at -> Nullable<Datetime>,
        #[max_length = 128]
        payment_id -> Nullable<Varchar>,
        created_at -> Datetime,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    stock_flow (id) {
        id -> Unsigned<BigInt>,
        #[max_length = 64]
        order_token -> Varchar,
        product_id -> Unsigned<BigInt>,
        quantity -> Integer,
        #[max_length = 24]
        op_type -> Varchar,
        /// Generated from op_type (RELEASE); never written.
        gives_back -> Nullable<Bool>,
        created_at -> Datetime,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    reconcile_run (id) {
        id -> Unsigned<BigInt>,
        started_at -> Datetime,
        finished_at -> Nullable<Datetime>,
        #[max_length = 16]
        status -> Varchar,
        #[max_length = 16]
        policy -> Varchar,
        product_id -> Nullable<Unsigned<BigInt>>,
        report -> Nullable<Longtext>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    reconcile_discrepancy (id) {
        id -> Unsigned<BigInt>,
        run_id -> Unsigned<BigInt>,
        product_id -> Unsigned<BigInt>,
        #[max_length = 32]
        kind -> Varchar,
        #[max_length = 64]
        order_token -> Nullable<Varchar>,
        #[max_length = 32]
        action -> Varchar,
        #[max_length = 32]
        outcome -> Varchar,
        #[max_length = 500]
        detail -> Varchar,
        created_at -> Datetime,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    rejected_message (id) {
        id -> Unsigned<BigInt>,
        #[max_length = 128]
        msg_id -> Varchar,
        #[max_length = 500]
        reason -> Varchar,
        #[max_length = 1024]
        body -> Varbinary,
        body_len -> Unsigned<Integer>,
        created_at -> Datetime,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    lease (name) {
        #[max_length = 64]
        name -> Varchar,
        #[max_length = 128]
        holder -> Varchar,
        expires_at -> Datetime,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    unwritable_order (order_token) {
        #[max_length = 64]
        order_token -> Varchar,
        product_id -> Unsigned<BigInt>,
        user_id -> Unsigned<BigInt>,
        quantity -> Unsigned<Integer>,
        reserved_at -> Datetime,
        #[max_length = 128]
        msg_id -> Varchar,
        #[max_length = 500]
        reason -> Varchar,
        refusals -> Unsigned<Integer>,
        first_refused_at -> Datetime,
        last_refused_at -> Datetime,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    payments (payment_id) {
        #[max_length = 128]
        payment_id -> Varchar,
        #[max_length = 64]
        order_token -> Varchar,
        product_id -> Unsigned<BigInt>,
        amount_cents -> Unsigned<BigInt>,
        paid_at -> Datetime,
        #[max_length = 16]
        outcome -> Varchar,
        created_at -> Datetime,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    products,
    product_stock,
    orders,
    stock_flow,
    reconcile_run,
    reconcile_discrepancy,
    rejected_message,
    lease,
    unwritable_order,
    payments,
);
