//! The side-by-side comparison runner (filled in below).
