//! Order tokens and ids as text: the status endpoint's path, the message key the
//! transaction check-back parses, the fields of a purchase-token payload.

#![no_main]

use domain::{OrderToken, ProductId, UserId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(token) = text.parse::<OrderToken>() {
        // The printed form is canonical: it reads back to the same token and prints the same.
        let printed = token.to_string();
        assert_eq!(printed.parse::<OrderToken>().as_ref(), Ok(&token));
        assert_eq!(printed.len(), token.product_id().to_string().len() + 33);
        let (product, _) = text.split_once('-').expect("a token has a dash");
        assert_eq!(product.parse::<ProductId>(), Ok(token.product_id()));
    }
    if let Ok(id) = text.parse::<UserId>() {
        assert_eq!(id.to_string().parse::<UserId>(), Ok(id));
    }
});
