"""The embedded goldens of WorkflowPerturb: 13 workflows written for this project (no external
data), the study's default source. Sizes cover the strata 5–7, 8–15 and 16+ (§5.3); most are
non-linear DAGs with parallel branches. Every one passes
:func:`~metamorph.studies.workflow_perturb.workflows.validate_workflow`.
"""

from __future__ import annotations

from metamorph.studies.workflow_perturb.workflows import END, START, Edge, Workflow, validate_workflow

__all__ = [
    "embedded_goldens",
]


def _chain(n: int) -> str:
    return " ".join(["S-1", *(f"{i}-{i + 1}" for i in range(1, n)), f"{n}-E"])


# (name, task, steps, edges as "u-v" tokens with S = START, E = END; None = a linear chain)
_EMBEDDED: tuple[tuple[str, str, tuple[str, ...], str | None], ...] = (
    (
        "brew_pour_over_coffee",
        "Brew a cup of pour-over coffee.",
        (
            "Boil fresh water in a kettle",
            "Grind the coffee beans to a medium-fine texture",
            "Rinse the paper filter with hot water",
            "Pour water slowly over the grounds in circles",
            "Serve the coffee in a warm mug",
        ),
        "S-1 S-2 S-3 1-4 2-4 3-4 4-5 5-E",
    ),
    (
        "cook_tomato_pasta",
        "Cook spaghetti with a simple tomato sauce.",
        (
            "Bring a large pot of salted water to a boil",
            "Chop the garlic and the onion",
            "Cook the spaghetti until al dente",
            "Simmer the onion, garlic and crushed tomatoes in olive oil",
            "Drain the pasta and toss it with the sauce",
            "Serve the pasta topped with grated parmesan",
        ),
        "S-1 S-2 1-3 2-4 3-5 4-5 5-6 6-E",
    ),
    (
        "change_flat_tire",
        "Change a flat tire on the roadside.",
        (
            "Park the car on flat ground and turn on the hazard lights",
            "Loosen the lug nuts on the flat tire",
            "Raise the car with the jack",
            "Remove the lug nuts and the flat tire",
            "Mount the spare tire and tighten the lug nuts by hand",
            "Lower the car and tighten the lug nuts fully",
        ),
        None,
    ),
    (
        "onboard_new_employee",
        "Onboard a new employee in their first week.",
        (
            "Prepare the employment contract",
            "Create the employee's email and system accounts",
            "Order a laptop and configure it",
            "Collect the signed contract and tax forms",
            "Assign a mentor from the team",
            "Hold the first-day welcome meeting",
            "Review the first-week goals with the manager",
        ),
        "S-1 S-2 S-3 S-5 1-4 2-6 3-6 4-6 5-6 6-7 7-E",
    ),
    (
        "plant_vegetable_bed",
        "Plant a raised vegetable bed in spring.",
        (
            "Choose a sunny spot for the bed",
            "Build the wooden frame of the raised bed",
            "Fill the frame with compost and topsoil",
            "Plan which vegetables go in each row",
            "Sow the seeds at the depth on the packet",
            "Water the bed gently",
            "Cover the bed with a fleece against frost",
            "Check the soil moisture every morning",
        ),
        None,
    ),
    (
        "clean_csv_data_pipeline",
        "Run a daily pipeline that cleans sales CSV files into a report table.",
        (
            "Download the day's sales CSV files from the SFTP server",
            "Validate the file headers against the expected schema",
            "Load the exchange-rate table for the day",
            "Parse the rows and drop exact duplicates",
            "Convert every amount to euros",
            "Flag rows with negative quantities for review",
            "Write the clean rows to the warehouse table",
            "Refresh the sales dashboard",
            "Email the data-quality summary to the analysts",
        ),
        "S-1 S-3 1-2 2-4 4-5 3-5 4-6 5-7 6-7 7-8 7-9 8-E 9-E",
    ),
    (
        "bake_sourdough_bread",
        "Bake a loaf of sourdough bread.",
        (
            "Feed the sourdough starter the night before",
            "Mix the flour and water and let them rest",
            "Add the active starter and the salt to the dough",
            "Stretch and fold the dough every half hour",
            "Let the dough rise until it grows by half",
            "Shape the dough into a tight ball",
            "Proof the shaped loaf in the fridge overnight",
            "Preheat the oven with the Dutch oven inside",
            "Score the loaf and bake it covered, then uncovered",
            "Cool the bread on a rack for an hour",
        ),
        "S-1 S-2 1-3 2-3 3-4 4-5 5-6 6-7 7-9 S-8 8-9 9-10 10-E",
    ),
    (
        "respond_to_outage",
        "Respond to a production outage of a web service.",
        (
            "Acknowledge the alert in the paging system",
            "Open an incident channel and name an incident lead",
            "Check the service dashboards for error rates and latency",
            "Review the deploys and config changes of the last hour",
            "Post a first status-page update",
            "Roll back the suspicious deploy",
            "Verify that the error rate returns to normal",
            "Post the all-clear on the status page",
            "Close the incident channel",
            "Write the incident timeline",
            "Schedule the blameless postmortem",
        ),
        "S-1 1-2 2-3 2-4 2-5 3-6 4-6 6-7 5-8 7-8 8-9 9-10 10-11 11-E",
    ),
    (
        "release_python_library",
        "Release a new version of a Python library.",
        (
            "Freeze the main branch for the release",
            "Run the full test suite on every supported Python version",
            "Run the linters and the type checker",
            "Write the changelog entry for the new version",
            "Bump the version number in the package metadata",
            "Open the release pull request",
            "Get the release pull request reviewed and merged",
            "Tag the merge commit with the version",
            "Build the wheel and the source distribution",
            "Upload the distributions to the package index",
            "Publish the release notes on the project page",
            "Announce the release on the mailing list",
        ),
        "S-1 1-2 1-3 1-4 1-5 2-6 3-6 4-6 5-6 6-7 7-8 8-9 9-10 10-11 10-12 11-E 12-E",
    ),
    (
        "submit_research_paper",
        "Prepare and submit a research paper to a conference.",
        (
            "Choose the target conference and note the deadline",
            "Write down the paper's main claim",
            "Collect the related work",
            "Design the experiments",
            "Run the baseline experiments",
            "Run the main experiments",
            "Make the figures and the result tables",
            "Draft the introduction",
            "Draft the method section",
            "Draft the related-work section",
            "Draft the results and discussion sections",
            "Write the abstract",
            "Ask two colleagues for internal review",
            "Revise the paper after the feedback",
            "Format the paper with the conference template",
            "Submit the paper through the conference system",
        ),
        "S-1 S-2 2-3 2-4 4-5 4-6 5-7 6-7 2-8 3-10 4-9 7-11 9-11 8-12 10-12 11-12 12-13 13-14 1-15 14-15 15-16 16-E",
    ),
    (
        "organize_workshop",
        "Organize a one-day technical workshop.",
        (
            "Set the workshop date and budget",
            "Book the venue",
            "Invite the keynote speakers",
            "Open the call for talks",
            "Select the talks with the program committee",
            "Publish the program on the website",
            "Open the registration",
            "Order the catering for the expected number of guests",
            "Arrange the audio and video equipment",
            "Print the badges",
            "Welcome the participants at the registration desk",
            "Run the sessions on schedule",
            "Collect the feedback survey",
            "Pay the invoices of the venue and the caterer",
            "Publish the slides and the recordings",
            "Send the thank-you notes to the speakers",
        ),
        "S-1 1-2 1-3 1-4 4-5 3-6 5-6 2-7 6-7 7-8 2-9 7-10 8-11 9-11 10-11 11-12 12-13 12-14 12-15 15-16 13-E 14-E 16-E",
    ),
    (
        "move_to_new_apartment",
        "Move from one apartment to another.",
        (
            "Give notice to the current landlord",
            "Sign the lease for the new apartment",
            "Book a moving company for the moving day",
            "Collect boxes and packing tape",
            "Sort out the things to donate or throw away",
            "Pack the books and the decorations",
            "Pack the kitchen",
            "Register the change of address with the post office",
            "Transfer the electricity and internet contracts",
            "Pack the clothes and the bedding on the last evening",
            "Load the truck on the moving day",
            "Unload the boxes into the new rooms",
            "Clean the old apartment",
            "Hand over the old keys to the landlord",
            "Unpack the kitchen first",
            "Assemble the bed and the furniture",
            "Unpack the remaining boxes",
        ),
        "S-1 S-2 2-3 2-8 2-9 S-4 S-5 4-6 5-6 6-7 7-10 10-11 3-11 11-12 11-13 13-14 1-14 12-15 12-16 15-17 16-17 8-E 9-E 14-E 17-E",
    ),
    (
        "train_and_deploy_model",
        "Train a text classifier and deploy it as an API.",
        (
            "Define the labels and the success metric with the stakeholders",
            "Export the labelled examples from the database",
            "Split the examples into train, validation and test sets",
            "Clean the texts and remove duplicates across the splits",
            "Train a logistic-regression baseline",
            "Fine-tune a small transformer model",
            "Tune the hyperparameters on the validation set",
            "Compare the models on the test set",
            "Write the model card",
            "Package the best model in a container",
            "Write the prediction API endpoint",
            "Add input validation and logging to the endpoint",
            "Load-test the API",
            "Deploy the container to the staging environment",
            "Run the smoke tests on staging",
            "Get sign-off from the product owner",
            "Deploy the container to production",
            "Set up monitoring for latency and prediction drift",
            "Schedule the monthly retraining job",
            "Announce the launch to the support team",
        ),
        (
            "S-1 1-2 2-3 3-4 4-5 4-6 6-7 5-8 7-8 8-9 8-10 S-11 11-12 10-13 12-13 13-14 14-15 9-16 15-16 16-17 "
            "17-18 17-19 17-20 18-E 19-E 20-E"
        ),
    ),
)


def _edges(spec: str | None, n: int) -> tuple[Edge, ...]:
    tokens = (spec or _chain(n)).split()
    named = {"S": START, "E": END}
    return tuple((named.get(u, u), named.get(v, v)) for u, v in (t.split("-") for t in tokens))


def embedded_goldens() -> list[Workflow]:
    """The project's own goldens: 13 everyday and engineering workflows (5–20 steps) covering the
    size strata 5–7 (4), 8–15 (5) and 16+ (4); most are non-linear DAGs with parallel branches
    (two are linear chains). Ids are ``embedded/<name>``; every one passes :func:`validate_workflow`."""
    out = []
    for name, task, steps, spec in _EMBEDDED:
        w = Workflow(f"embedded/{name}", task, steps, _edges(spec, len(steps)), "embedded")
        validate_workflow(w, "embedded")
        out.append(w)
    return out
