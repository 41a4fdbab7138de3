//! Taking over the runs a process that is gone left behind: queued runs
//! ([`Supervisor::resume`]), runs waiting for approval
//! ([`Supervisor::resume_waiting`]) and pipelines cut off mid-way
//! ([`Supervisor::resume_pipeline`]). Each waits for its turn like any run
//! of this supervisor; one that cannot go on is recorded `interrupted`.

use super::*;
use crate::store::TakenRun;
use crate::types::Trigger;

impl Supervisor {
    /// Takes over `queued`, a run accepted (and claimed `queued`) by a
    /// process that is gone and now owned by this one: it waits for a slot
    /// and runs under its own id with its stored input, model and template
    /// variables, like any queued run. One that cannot be prepared any more (its agent was
    /// removed, say) is recorded `interrupted` with the reason. Returns the
    /// run's state now.
    pub async fn resume(
        self: &Arc<Self>,
        snapshot: Arc<Snapshot>,
        queued: &RunRecord,
    ) -> Result<RunState, SubmitError> {
        if !self.lock().accepting {
            return Err(SubmitError::ShuttingDown);
        }
        let context = self.store.queued_template_context(&queued.id).await?;
        let request = RunRequest::again(queued, context.as_deref());
        let prepared = match Job::prepare_blocking(snapshot.clone(), request, self.env.clone())
            .await
        {
            Ok(prepared) => prepared,
            Err(message) => {
                return self.interrupt(&queued.id, format!(
                    "interrupted: queued when the daemon that accepted it stopped, and it cannot be started again: {message}"
                )).await;
            }
        };
        let hub = Arc::new(Hub::default());
        // Entered as waiting (never with a slot taken here): `drive` starts
        // it in the store when its turn comes.
        let schedule = queued
            .schedule_id
            .clone()
            .filter(|_| queued.trigger == Trigger::Schedule);
        self.enter_waiting(&queued.agent, &queued.id, schedule, &hub)?;
        self.publish_counts();
        let this = self.clone();
        self.tracker
            .spawn(async move { this.drive(prepared, hub, false, None).await });
        Ok(RunState::Queued)
    }

    /// Runs `taken`, a queued run of a busy node that this one took over
    /// and started in the store ([`crate::store::Store::claim_queued`]),
    /// in a slot reserved for it with [`Supervisor::reserve_slots`] (given
    /// back when the run ends). It runs under its own id with its stored
    /// input, model and template variables and this node's definition of
    /// its agent; one that cannot be prepared here (a variable missing on
    /// this node, say) is recorded `interrupted` with the reason.
    pub async fn run_taken(
        self: &Arc<Self>,
        snapshot: Arc<Snapshot>,
        taken: TakenRun,
    ) -> Result<RunState, SubmitError> {
        let run = &taken.run;
        let request = RunRequest::again(run, taken.template_context.as_deref());
        let prepared = match Job::prepare_blocking(snapshot.clone(), request, self.env.clone())
            .await
        {
            Ok(prepared) => prepared,
            Err(message) => {
                self.release_slot();
                return self
                    .interrupt(&run.id, format!(
                        "interrupted: taken over from the queue of a busy node, and it cannot be started here: {message}"
                    ))
                    .await;
            }
        };
        let hub = Arc::new(Hub::default());
        let schedule = run
            .schedule_id
            .clone()
            .filter(|_| run.trigger == Trigger::Schedule);
        {
            let mut state = self.lock();
            let mut live = self.live(&run.agent, schedule, &hub, false);
            live.slot = true;
            state.insert(&run.id, live);
        }
        self.publish_counts();
        let this = self.clone();
        // Driven as claimed running: it holds its slot and is started.
        self.tracker
            .spawn(async move { this.drive(prepared, hub, true, None).await });
        Ok(RunState::Running)
    }

    /// Takes over `waiting`, a run left `waiting_approval` by a process
    /// that is gone: it goes on from its stored checkpoint, still waiting
    /// for the decision (holding no slot), and when decided runs to its end
    /// like any run. One that cannot be prepared any more (its agent was
    /// removed, say) or has no usable checkpoint is recorded `interrupted`
    /// with the reason. Returns the run's state now.
    pub async fn resume_waiting(
        self: &Arc<Self>,
        snapshot: Arc<Snapshot>,
        waiting: &WaitingRun,
    ) -> Result<RunState, SubmitError> {
        if !self.lock().accepting {
            return Err(SubmitError::ShuttingDown);
        }
        let run = &waiting.run;
        let checkpoint = self
            .store
            .approval_checkpoint(&run.id)
            .await?
            .ok_or_else(|| "its checkpoint is missing".to_string())
            .and_then(|text| {
                serde_json::from_str::<Checkpoint>(&text)
                    .map_err(|e| format!("its checkpoint cannot be read: {e}"))
            });
        let request = RunRequest {
            input: Some(run.input.clone()),
            model: Some(run.model.clone()).filter(|m| !m.is_empty()),
            run_id: Some(run.id.clone()),
            ..RunRequest::new(&run.agent, run.trigger)
        };
        let prepared =
            checkpoint.and_then(
                |checkpoint| match Job::prepare(&snapshot, request, &self.env)? {
                    Job::Agent(mut prepared) => {
                        prepared.spec.resume = Some(checkpoint);
                        Ok(prepared)
                    }
                    Job::Pipeline(_) => Err(format!(
                        "agent `{}` is a pipeline now, and its checkpoint is an agent's",
                        run.agent
                    )),
                },
            );
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(message) => {
                return self.interrupt(&run.id, format!(
                    "interrupted: waiting for approval when the daemon stopped, and it cannot go on: {message}"
                )).await;
            }
        };
        let hub = Arc::new(Hub::default());
        {
            let mut state = self.lock();
            let mut live = self.live(&run.agent, None, &hub, false);
            live.waiting_approval = true;
            state.insert(&run.id, live);
        }
        self.publish_counts();
        let this = self.clone();
        // Driven as claimed (no wait for a slot, no start in the store): the
        // engine goes straight back to waiting, which needs no slot.
        self.tracker
            .spawn(async move { this.drive(Job::Agent(prepared), hub, true, None).await });
        Ok(RunState::WaitingApproval)
    }

    /// Records a run left by a process that is gone, which this one cannot
    /// take over, `interrupted` for `reason`.
    async fn interrupt(&self, id: &str, reason: String) -> Result<RunState, SubmitError> {
        self.store
            .finish_run(
                id,
                RunState::Interrupted,
                Some(reason),
                None,
                Default::default(),
            )
            .await?;
        Ok(RunState::Interrupted)
    }

    /// Resumes `run`, a pipeline run left `running` by a process that is
    /// gone and taken over by this one ([`Store::take_over_pipelines`]):
    /// it waits for a slot like a queued run, then runs the steps not
    /// stored finished. One whose agent is no longer a pipeline is
    /// recorded `interrupted` with the reason.
    pub async fn resume_pipeline(
        self: &Arc<Self>,
        snapshot: Arc<Snapshot>,
        run: &RunRecord,
    ) -> Result<RunState, SubmitError> {
        if !self.lock().accepting {
            return Err(SubmitError::ShuttingDown);
        }
        let context = self.store.pipeline_context(&run.id).await?;
        let job = match crate::run::PipelineJob::resume(
            &snapshot,
            run,
            context.as_deref(),
            &self.env,
        ) {
            Ok(job) => job,
            Err(message) => {
                let reason = format!(
                    "interrupted: a pipeline cut off when its daemon stopped, and it cannot be resumed: {message}"
                );
                self.store
                    .finish_run(
                        &run.id,
                        RunState::Interrupted,
                        Some(reason),
                        None,
                        Default::default(),
                    )
                    .await?;
                return Ok(RunState::Interrupted);
            }
        };
        let hub = Arc::new(Hub::default());
        let schedule = run
            .schedule_id
            .clone()
            .filter(|_| run.trigger == Trigger::Schedule);
        self.enter_waiting(&run.agent, &run.id, schedule, &hub)?;
        self.publish_counts();
        let this = self.clone();
        self.tracker.spawn(async move {
            this.drive(Job::Pipeline(Box::new(job)), hub, false, None)
                .await
        });
        Ok(RunState::Running)
    }
}
