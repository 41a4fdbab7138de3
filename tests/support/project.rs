//! A throwaway project directory whose `mock` provider points at a mock
//! server, with one agent `a`.

use super::mock_llm::MockLlm;

/// Creates the project; `agent` is the YAML of `agents/a.yaml`.
pub fn project_with_mock(mock: &MockLlm, agent: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!(
            "providers:\n  mock: {{ kind: openai, base_url: \"{}\" }}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("agents/a.yaml"), agent).unwrap();
    dir
}
