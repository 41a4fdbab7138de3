//! Helpers shared by the integration tests (`mod support;` in each test
//! file). Each test crate compiles this separately and uses only a part.
#![allow(dead_code)]

pub mod mock_llm;
pub mod project;
