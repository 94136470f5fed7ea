"""Events that leave a transition: the catalogue of their types and shapes, the in-process
hooks that run after the commit, the transactional outbox that carries them out of the
process, its publishers (RabbitMQ, webhooks), and OpenTelemetry trace context.

    import jobsup

    @jobsup.on("job.dead_lettered")
    def page_someone(event):
        ...

Nothing here costs a transition anything until a hook is registered or a publisher is
configured (`events_publisher`): only then do the transitions run the step that builds
events (`jobsup.events.publishing`).
"""
