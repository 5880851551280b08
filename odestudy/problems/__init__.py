"""Problems shipped with the study beyond the reference's oscillator: the other families
of neural ODEs researchers train, each a worked example of `odestudy.AbstractODEProblem`
written against the public API only. They are imported when first named
(`problem.LAZY_PROBLEMS`): `latent_ode` (`latent.LatentODE`) and `forced_oscillator`
(`controlled.ForcedOscillator`)."""
